"""The CI gate: every cell of matrices/default.toml against the committed CPU goldens.

One test per cell id, so ``pytest tests/parity -k 'gemma3 and B4'`` selects cells. PASS
passes; ORACLE-BUG is an expected failure (the oracle disagrees with itself, the golden
holds the evidence); UNSUPPORTED is skipped with its reason; everything else fails with
the first divergence and the rerun command.
"""

import pytest

from batchlab.cli import DEFAULT_GOLDENS, DEFAULT_MATRIX
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.matrix.spec import load_matrix

CELLS = load_matrix(DEFAULT_MATRIX)
REFERENCE = Reference(matrix="matrices/default.toml", goldens=DEFAULT_GOLDENS)


@pytest.mark.parity
@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_cell(cell):
    result = evaluate_cell(cell, REFERENCE)
    if result.status == "ORACLE-BUG":
        pytest.xfail(result.detail)
    if result.status == "UNSUPPORTED":
        pytest.skip(result.detail)
    assert result.status == "PASS", (
        f"{result.status}: {result.detail}\n{result.traceback or ''}\nrerun: {result.rerun}"
    )
