"""How far the invariant path is from l1 (and so from mlx-lm's batch mode): KL statistics.

    PYTHONPATH=. python tools/probes/invariant_kl.py [MODEL ...]   # default below

For each model, the same cells run on l1 and on the invariant path (full logprobs kept),
and ``batchlab.judging.kl.kl_stats`` compares them token by token with l1 as the reference
(a row's comparison stops at its first token that differs). Output: one line per model
with the statistics and how many steps were bit-identical. docs/invariant.md keeps the
figures.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from batchlab.cells.spec import expand
from batchlab.judging.kl import kl_stats
from batchlab.matrix.engine_run import run_cell

MODELS = ["smollm2-135m", "gemma3", "gpt-oss", "gemma4-12b"]


def cells(model: str):
    real = model == "smollm2-135m"
    sweep = {"models": [model], "batch": [4 if real else 16],
             "padding": ["chat" if real else "needle"], "scripts": ["join-evict"],
             "contexts": ["short" if real else "wrap"], "steps": 12 if real else 24}
    return expand({"defaults": {"path": "invariant"}, "sweep": [sweep]}, where="kl")


def main(models: list[str]) -> None:
    for model in models or MODELS:
        for cell in cells(model):
            inv = run_cell(cell)
            l1 = run_cell(replace(cell, path="l1"))
            same = sum(a.digest == b.digest for name in l1.rows
                       for a, b in zip(l1.rows[name], inv.rows[name]))
            total = sum(len(v) for v in l1.rows.values())
            print(f"{cell.id}: {kl_stats(l1, inv).describe()}; "
                  f"{same}/{total} steps bit-identical to l1", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
