"""The real model's gate: every cell of matrices/real.toml against the committed goldens.

Its own matrix (the default one stays the quick main job); CI runs it with the rest of the
suite. No ORACLE-BUG is expected here: the oracle's serial check agrees on every cell.
"""

import pytest

from batchlab.cells.spec import load_matrix
from batchlab.defaults import DEFAULT_GOLDENS, PROJECT_ROOT
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.status import Status

MATRIX = PROJECT_ROOT / "matrices" / "real.toml"
CELLS = load_matrix(MATRIX)
REFERENCE = Reference(matrix="matrices/real.toml", goldens=DEFAULT_GOLDENS)


def test_the_real_matrix_covers_what_issue_16_asks():
    assert len(CELLS) == 10
    assert {c.model for c in CELLS} == {"smollm2-135m"}
    assert {c.batch for c in CELLS} == {1, 2, 3, 4, 8}
    assert {c.script for c in CELLS} >= {"static", "join", "evict", "join-evict"}
    assert {c.padding for c in CELLS} == {"chat", "corpus-equal", "corpus-ragged"}
    assert min(c.steps for c in CELLS) >= 32


@pytest.mark.parity
@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_real_cell(cell):
    result = evaluate_cell(cell, REFERENCE)
    assert result.status == Status.PASS, (
        f"{result.status}: {result.detail}\n{result.traceback or ''}\nrerun: {result.rerun}")
