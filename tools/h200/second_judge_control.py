"""A control for the invariant path's second judge on a GPU: how far mlx-lm's own batch
bits at B are from its bits for each row run alone (B=1), beside how far the invariant
path is from each. If the invariant path sits as close to the oracle's batch bits as the
oracle's own B=1 runs do, the second judge's KL gate is measuring the backend's rounding,
not a bug. Prints one line per cell and comparison (KL statistics, greedy rows up to
their first differing token, as the second judge compares).

    python tools/h200/second_judge_control.py MATRIX FILTER
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import replace

from batchlab.cells.select import select
from batchlab.cells.spec import expand
from batchlab.judging.judging import judging_for
from batchlab.matrix.engine_run import run_cell
from batchlab.matrix.second import second_judge
from batchlab.matrix.solo import solo_cell
from batchlab.oracle.batch import run_batch_oracle
from batchlab.trajectory import Trajectory
from batchlab.zoo import load


def oracle(cell):
    loaded = load(cell.model)
    return run_batch_oracle(cell, loaded.model, loaded.dtype, keep_values=True)


def main() -> None:
    matrix, pattern = sys.argv[1], sys.argv[2]
    cells = select(expand(tomllib.load(open(matrix, "rb"))), pattern, None)
    judging = judging_for("invariant")
    for cell in cells:
        batch = oracle(replace(cell, path="l1"))
        rows = {}
        for row in cell.rows:
            alone = oracle(solo_cell(replace(cell, path="l1"), row))
            rows[row.name] = alone.rows[row.name]
        solo = Trajectory(rows=rows, dtype=batch.dtype)
        inv = run_cell(cell)
        for label, want, got in (("oracle B=1 vs oracle batch", batch, solo),
                                 ("invariant vs oracle batch", batch, inv),
                                 ("invariant vs oracle B=1", solo, inv)):
            verdict = second_judge(cell, judging, False, want, got)
            print(f"{cell.id} | {label} | {'PASS' if verdict.passed else 'FAIL'} | "
                  f"{verdict.detail[-330:]}", flush=True)


if __name__ == "__main__":
    main()
