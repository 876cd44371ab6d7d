"""Paired A/B rounds for the device probes: every variant timed once a round, the order
rotated each round, so the variants share the process, the allocator and the device's
state (separate ``batchlab bench`` processes moved 13.3-13.7 ms/step for the same code)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from contextlib import AbstractContextManager

from batchlab.bench.engines import path_driver
from batchlab.bench.measure import gc_paused, make_prompts
from batchlab.bench.shapes import load_model
from batchlab.engine.paths.registry import PATHS


def paired_steps(model: str, batch: int, rounds: int, names: list[str],
                 variant: Callable[[str], AbstractContextManager], path: str = "fast",
                 label: str = "") -> dict[str, list[float]]:
    """``path``'s ms per decode step on ``model`` (B prompts of 128 tokens, 128 generated,
    greedy), each variant run inside ``variant(name)``, in paired rounds."""
    loaded = load_model(model)
    prompts = make_prompts(batch, 128, loaded.vocab_size, 0)
    drive = path_driver(PATHS[path])

    def step_ms(name: str) -> float:
        with variant(name), gc_paused():
            run = drive(loaded.model, prompts, 128)
        return run.decode_s / run.decode_steps * 1e3

    return paired_rounds(names, step_ms, rounds, f"{model} B={batch}{label}")


def paired_rounds(names: list[str], step_ms: Callable[[str], float], rounds: int,
                  label: str) -> dict[str, list[float]]:
    """Warm each variant once, then time ``rounds`` rounds; print each round, then each
    variant's median and its median ratio to ``names[0]``."""
    for name in names:
        step_ms(name)  # warm-up: this variant's kernels compiled
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            times[name].append(step_ms(name))
        print(f"round {r}: " + ", ".join(f"{n} {times[n][-1]:.2f}" for n in names), flush=True)
    base = times[names[0]]
    for name in names:
        ratios = [a / b for a, b in zip(times[name], base, strict=True)]
        print(f"{label} {name:18s} median {statistics.median(times[name]):.2f} ms/step "
              f"[{min(times[name]):.2f}-{max(times[name]):.2f}], / {names[0]} "
              f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]",
              flush=True)
    return times
