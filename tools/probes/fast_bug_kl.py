"""How far the fast path's seeded bugs move a cell's logprobs, against the noise of two
correct attentions (``attention_rounding.py``).

On a GPU fast is judged by KL against mlx-lm's batch mode (its unmasked decode runs
another attention kernel than the oracle's masked one), so its gate there must sit above
that noise and below what a bug does. This runs, on the CPU with the live oracle, every
self-test bug whose name contains the argument (default ``fast``) on its candidate fast
cells, and prints each cell's verdict line: on the CPU fast is bit-exact, so a bug FAILs
there anyway, and the line's KL statistics say how far the bug moved the logprobs (up to
the row's first different token, as the gate counts them).

    PYTHONPATH=. python tools/probes/fast_bug_kl.py [bug-name-substring]
"""

from __future__ import annotations

import sys

from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.defaults import PROJECT_ROOT
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.selftest.catalog import select_bugs
from batchlab.selftest.inject import applied

MATRIX = PROJECT_ROOT / "matrices" / "default.toml"


def main(pattern: str) -> None:
    cells = load_matrix(MATRIX)
    ref = Reference(matrix=str(MATRIX), goldens=PROJECT_ROOT / "goldens", live=True)
    for bug in select_bugs(pattern):
        chosen = [c for c in select(cells, bug.cells, None) if c.path == "fast"]
        for cell in chosen:
            with applied(bug.inject()):
                result = evaluate_cell(cell, ref)
            print(f"{bug.name} {cell.id}: {result.status.value} {result.detail}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fast")
