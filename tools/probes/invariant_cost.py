"""Decode ms/step of the invariant path against l1, robust to a shared, busy CPU.

    PYTHONPATH=. python tools/probes/invariant_cost.py [MODEL ...]

``batchlab bench`` reports wall-clock medians; on a 2-core machine shared with other
jobs those swing by 2-3x between repeats (even for two paths that run the same ops).
Here each (model, B) alternates l1 and invariant ``ROUNDS`` times with the bench's own
driver and reports, per path, the minimum wall ms/step and the median CPU ms/step (the
process's CPU time over all its threads, which another job's load inflates far less
than wall time): a run of ``GEN`` tokens minus a run of ``SHORT`` tokens, per extra
step, so prefill and setup cancel. Sliding-window models are where the paths differ;
llama (the same ops on both, on the CPU) is the noise control.
"""

from __future__ import annotations

import statistics
import sys
import time

from batchlab.bench.engines import PATHS
from batchlab.cells.scenarios import seeded_prompt
from batchlab.zoo import load

MODELS = ["gemma3", "gpt-oss", "llama"]
BATCHES = (1, 2, 4, 8, 16)
ROUNDS, PROMPT, GEN, SHORT = 5, 32, 64, 16


def measure(path: str, model, prompts) -> tuple[float, float]:
    """(wall ms per decode step, CPU ms per extra decode step) of one round."""
    t0 = time.process_time()
    PATHS[path](model, prompts, SHORT)
    t1 = time.process_time()
    run = PATHS[path](model, prompts, GEN)
    t2 = time.process_time()
    return 1e3 * run.decode_s / run.decode_steps, 1e3 * ((t2 - t1) - (t1 - t0)) / (GEN - SHORT)


def main(models: list[str]) -> None:
    for name in models or MODELS:
        model = load(name).model
        for B in BATCHES:
            prompts = [list(seeded_prompt(f"r{i}", PROMPT, 0)) for i in range(B)]
            wall = {"l1": [], "invariant": []}
            cpu = {"l1": [], "invariant": []}
            for path in wall:
                PATHS[path](model, prompts, 4)  # warm-up
            for _ in range(ROUNDS):
                for path in wall:
                    w, c = measure(path, model, prompts)
                    wall[path].append(w)
                    cpu[path].append(c)
            lo, inv = statistics.median(cpu["l1"]), statistics.median(cpu["invariant"])
            print(f"{name} B={B}: wall min l1 {min(wall['l1']):.2f} / invariant "
                  f"{min(wall['invariant']):.2f} ms; CPU median l1 {lo:.2f} / invariant "
                  f"{inv:.2f} ms per step, ratio {inv / lo:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
