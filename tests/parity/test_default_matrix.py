"""The CI gate: every cell of matrices/default.toml against the committed CPU goldens.

One test per cell id, so ``pytest tests/parity -k 'gemma3 and B4'`` selects cells. PASS
passes; ORACLE-BUG is an expected failure only for the cells pinned in gate_pins.json
(the oracle disagrees with itself, the golden holds the evidence, the engine equals the
oracle's batch bits); an ORACLE-BUG outside the pin fails, and so does a pinned cell that
is anything else. UNSUPPORTED is skipped with its reason; everything else fails with the
first divergence and the rerun command. Runs under pytest-xdist (``-n 2``) too.
"""

import pytest

from batchlab.backend import backend_key
from batchlab.cells.spec import load_matrix
from batchlab.defaults import DEFAULT_GOLDENS, DEFAULT_MATRIX
from batchlab.golden.pins import WRITE_COMMAND, read_pins
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.status import Status

CELLS = load_matrix(DEFAULT_MATRIX)
REFERENCE = Reference(matrix="matrices/default.toml", goldens=DEFAULT_GOLDENS)
PINNED_ORACLE_BUGS = frozenset(read_pins().oracle_bug.get(backend_key(), ()))


@pytest.mark.parity
@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_cell(cell):
    result = evaluate_cell(cell, REFERENCE)
    what = f"{result.status}: {result.detail}\n{result.traceback or ''}\nrerun: {result.rerun}"
    pinned = cell.id in PINNED_ORACLE_BUGS
    if result.status == Status.ORACLE_BUG:
        if pinned:
            pytest.xfail(result.detail)
        pytest.fail(f"ORACLE-BUG but not pinned in tests/parity/gate_pins.json for "
                    f"{backend_key()}: {what}\nif the goldens' evidence is new and checked, "
                    f"run `{WRITE_COMMAND}`")
    assert not pinned, (f"pinned as ORACLE-BUG in tests/parity/gate_pins.json but {what}\n"
                        f"if the oracle's bug is gone, regen the golden and run "
                        f"`{WRITE_COMMAND}`")
    if result.status == Status.UNSUPPORTED:
        pytest.skip(result.detail)
    assert result.status == Status.PASS, what
