"""``run_cell`` keeps each step's logprob vector by default.

On the CPU goldens every cell is bit-exact, so nothing in the default matrix reads the
vectors and a ``keep_values=False`` default survived it (docs/mutation.md). They are
what a FAIL's ``max |d logprob|`` and a lab path's KL statistics are computed from.
"""

import numpy as np
from loaded_matrices import matrix_cells

from batchlab.cells.select import select
from batchlab.cli import DEFAULT_MATRIX
from batchlab.matrix.engine_run import run_cell
from batchlab.zoo import load
from batchlab.zoo.load import vocab_size


def test_run_cell_keeps_the_logprob_vectors_the_digests_were_made_from():
    (cell,) = select(matrix_cells(DEFAULT_MATRIX), "l1/llama/B2/ragged/static/ctx-short", None)
    got = run_cell(cell)
    steps = [s for row in got.rows.values() for s in row]
    assert len(steps) == 2 * 12
    vocab = vocab_size(load("llama").model)
    for s in steps:
        assert s.values is not None and s.values.shape == (vocab,)
        assert s.values.dtype == np.float32
        # the emitted token is the one greedy picked from this very vector
        assert int(np.argmax(s.values)) == s.token
    assert all(s.values is None for row in run_cell(cell, keep_values=False).rows.values()
               for s in row)
