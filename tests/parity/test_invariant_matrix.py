"""The batch-invariance gate: every cell of matrices/invariant.toml through the solo gate.

No goldens: each row of a cell is compared with the same row run alone on the same path
(``batchlab/matrix/solo.py``). The matrix is its own file (the default one is the oracle's
gate); the negative control and the seeded invariance bugs are in ``batchlab selftest``.
"""

import pytest

from batchlab.cells.spec import load_matrix
from batchlab.defaults import DEFAULT_GOLDENS, PROJECT_ROOT
from batchlab.judging.judging import Reference as JudgeReference
from batchlab.judging.judging import judging_for
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.status import Status

MATRIX = PROJECT_ROOT / "matrices" / "invariant.toml"
CELLS = load_matrix(MATRIX)
REFERENCE = Reference(matrix="matrices/invariant.toml", goldens=DEFAULT_GOLDENS)
FAMILIES = {"llama", "qwen3", "minicpm", "gemma3", "gemma4-12b", "gemma4-e4b", "gemma4-26b",
            "gpt-oss", "qwen3-moe", "qwen3.5", "mamba2", "lfm2", "smollm2-135m"}


def test_the_invariant_matrix_covers_what_issue_20_asks():
    assert len(CELLS) == 47
    assert {c.path for c in CELLS} == {"invariant"}
    assert judging_for("invariant").reference is JudgeReference.SOLO
    assert {c.model for c in CELLS} == FAMILIES
    needles = [c for c in CELLS if c.padding == "needle"]
    assert {c.model for c in needles} == FAMILIES - {"smollm2-135m"}
    assert {c.batch for c in needles} == {16, 32}
    assert {c.script for c in needles} == {"join-evict", "staggered", "evict-many", "trickle"}
    assert {c.seed for c in needles} == {0, 1, 2, 3}
    bs_n = [c for c in CELLS if c.script == "static"]
    assert {c.model for c in bs_n} == FAMILIES - {"smollm2-135m"} and {c.batch for c in bs_n} == {8}


@pytest.mark.parity
@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_invariant_cell(cell):
    result = evaluate_cell(cell, REFERENCE)
    assert result.status == Status.PASS, (
        f"{result.status}: {result.detail}\n{result.traceback or ''}\nrerun: {result.rerun}")
