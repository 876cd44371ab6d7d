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
from pathlib import Path

import pytest
from loaded_matrices import matrix_cells

from batchlab.cells.cell import Cell
from batchlab.cells.result import CellResult
from batchlab.defaults import DEFAULT_MATRIX
from batchlab.matrix.evaluate import Reference
from batchlab.selftest.catalog import CATALOG
from batchlab.selftest.modes import InProcessMode
from batchlab.selftest.run import candidates_of

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


def control_ids() -> set[str]:
    """The control's cells as parity test parameters, ``<gate>:<cell id>``: the candidates
    of every bug that reaches batchlab's in-process engine (``run_selftest``'s control)."""
    mode = InProcessMode("batchlab")
    bugs = [b for b in CATALOG if mode.skip(b) is None]
    found = candidates_of(bugs, {m: matrix_cells(m or DEFAULT_MATRIX) for m in
                                 {b.matrix for b in bugs}})
    gate = {b.name: Path(b.matrix).stem if b.matrix else "default" for b in bugs}
    return {f"{gate[b.name]}:{c.id}" for b in bugs for c in found[b.name]}
