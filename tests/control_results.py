"""The self-test's control results, read back by the parity cells they are.

The self-test's control (tests/unit/test_selftest.py's module fixture) evaluates 212
cells of the default and invariant matrices with no bug injected, through
``evaluate_cell(cell, Reference(matrix, goldens, engine="batchlab"))``: the very call
``tests/parity/test_matrices.py::test_cell`` makes for the same cell. The suite ran each
of them twice (~21 s of CPU). tests/conftest.py puts those parity cells in the
self-test's xdist group, after its module, so they run in the process that holds the
control's results, and ``test_cell`` judges the result recorded for an equal cell and
reference instead of evaluating it a second time. Anything else (a cell the control did
not run, another reference, a parity run without the self-test) is evaluated as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from batchlab.cells.cell import Cell
from batchlab.cells.result import CellResult
from batchlab.matrix.evaluate import Reference
from batchlab.selftest.modes import InProcessMode

_RECORDED: dict[tuple[str, Reference], tuple[Cell, CellResult]] = {}


@contextlib.contextmanager
def recording_the_control() -> Iterator[None]:
    """Record every cell result of the in-process control (batchlab's engine, no bug
    injected: the control runs before any bug, see ``run_selftest``)."""
    control = InProcessMode.control

    def recorded_control(mode, cells, ref_of):
        results = control(mode, cells, ref_of)
        if type(mode) is InProcessMode and mode.engine == "batchlab":
            for cell, result in zip(cells, results, strict=True):
                _RECORDED[(cell.id, ref_of(cell, mode.engine))] = (cell, result)
        return results

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InProcessMode, "control", recorded_control)
        yield


def control_result(cell: Cell, ref: Reference) -> CellResult | None:
    """The control's result for this cell under this reference; None if it has none."""
    cell_and_result = _RECORDED.get((cell.id, ref))
    if cell_and_result is None or cell_and_result[0] != cell:
        return None
    return cell_and_result[1]
