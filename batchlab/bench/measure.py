"""The sweep: for each B, a warm-up run per engine, then repeats interleaved across
engines, then one ``Result`` per (B, engine) with medians and min/max.

Interleaving (repeat r runs the engines in an order rotated by r: l1, BG, l1 ... then
BG, l1 ...) spreads clock boosts, thermal drift and allocator state evenly over the
engines, so the ratio of medians is fair even when absolute times drift between runs.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from mlx import nn

from batchlab.bench.engines import (
    BATCH_GENERATOR,
    GENERATE_STEP,
    L1,
    PATHS,
    Driver,
    Run,
    engines_at,
)

SINGLE_STREAM_TARGET = 0.95  # the mission: l1 at B=1 within 5% of generate_step's speed


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchSpec:
    batches: tuple[int, ...]
    prompt_len: int
    gen_len: int
    paths: tuple[str, ...] = ("l1",)
    repeats: int = 3
    seed: int = 0

    def __post_init__(self):
        if not self.batches or min(self.batches) < 1:
            raise ValueError(f"--batch needs sizes >= 1, got {self.batches}")
        if self.prompt_len < 1 or self.gen_len < 2:
            raise ValueError("need --prompt-len >= 1 and --gen-len >= 2")
        if self.repeats < 1:
            raise ValueError("--repeats must be >= 1")
        unknown = [p for p in self.paths if p not in PATHS]
        if unknown:
            raise ValueError(f"unknown path(s) {', '.join(unknown)}; known: {', '.join(PATHS)}")

    def num_runs(self) -> int:
        """Every run the sweep makes, warm-ups included (the progress bar's total)."""
        per_b = [len(engines_at(self.paths, b)) for b in self.batches]
        return sum(per_b) * (self.repeats + 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """One engine at one B over the repeats: the record every printer reads."""

    model: str
    backend: str
    engine: str
    batch: int
    prompt_len: int
    gen_len: int
    repeats: int
    ms_step: float  # median decode ms per step
    ms_step_min: float
    ms_step_max: float
    tok_s: float  # aggregate decode tok/s at the median step
    tok_s_row: float  # per row
    prefill_tok_s: float  # median
    peak_gb: float  # max over repeats, weights included
    ratio_vs_mlx_lm: float  # tok/s / BatchGenerator's tok/s at this B (>1: faster)
    # the spread of that ratio: min and max over the repeats of (BatchGenerator's step in
    # repeat r) / (this engine's step in repeat r); None for BatchGenerator itself
    ratio_min: float | None = None
    ratio_max: float | None = None
    # one-sided Wilcoxon signed-rank p-value over those per-repeat ratios, for "this
    # engine is slower than BatchGenerator": small (< 0.05) only when it loses
    # consistently, not when one noisy repeat drags the median under 1.0
    slower_p: float | None = None
    ratio_vs_generate_step: float | None  # same against generate_step, B=1 only
    roofline_pct: float | None  # weight-streaming bound / median step, in %
    bandwidth_gbs: float | None
    streamed_gb: float
    mlx: str
    mlx_lm: str
    # this engine's step over l1's in the same repeat (> 1: slower), median and spread
    # over the repeats: a pairing that cancels what drifts between repeats (the H200's
    # host speed moved 1.5x between runs of the same code at B=1); None without l1
    l1_ratio: float | None = None
    l1_ratio_min: float | None = None
    l1_ratio_max: float | None = None


def make_prompts(batch: int, prompt_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    """B random prompts, the same for every engine (a given seed and B)."""
    rng = np.random.default_rng([seed, batch])
    return rng.integers(0, vocab_size, size=(batch, prompt_len)).tolist()


def sweep(
    model: nn.Module,
    spec: BenchSpec,
    vocab_size: int,
    on_run: Callable[[str, int, str], None] | None = None,
    on_batch: Callable[[int, list[Run]], None] | None = None,
) -> list[Run]:
    """Every timed run (warm-ups excluded). ``on_run(engine, B, label)`` is called before
    each run, ``on_batch(B, runs)`` after each B."""
    runs: list[Run] = []
    for batch in spec.batches:
        timed = []
        for r, name, drive, prompts in interleaved(model, spec, batch, vocab_size, on_run):
            if on_run:
                on_run(name, batch, f"repeat {r + 1}/{spec.repeats}")
            with gc_paused():
                run = drive(model, prompts, spec.gen_len)
            timed.append(dataclasses.replace(run, repeat=r))
        runs += timed
        if on_batch:
            on_batch(batch, timed)
    return runs


def interleaved(model: nn.Module, spec: BenchSpec, batch: int, vocab_size: int,
                on_run: Callable[[str, int, str], None] | None = None,
                ) -> Iterator[tuple[int, str, Driver, list[list[int]]]]:
    """The engines of one B: each run once untimed (warm-up: kernels, allocator, shapes
    of this B), then yielded as ``(repeat, name, driver, prompts)`` for every repeat, in
    an order rotated by the repeat (the module docstring says why)."""
    engines = engines_at(spec.paths, batch)
    prompts = make_prompts(batch, spec.prompt_len, vocab_size, spec.seed)
    for name, drive in engines:
        if on_run:
            on_run(name, batch, "warm-up")
        with gc_paused():
            drive(model, prompts, spec.gen_len)
    for r in range(spec.repeats):
        for name, drive in engines[r % len(engines):] + engines[: r % len(engines)]:
            yield r, name, drive, prompts


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for one run, as ``timeit`` does. A full
    collection with mlx-lm loaded is long next to a decode window: landing in one
    engine's window and not in the other's, it would be read as a speed difference."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def summarize(
    runs: list[Run],
    *,
    model: str,
    backend: str,
    spec: BenchSpec,
    bound_s: float | None,
    bandwidth: float | None,
    streamed_bytes: int,
    versions: dict[str, str],
) -> list[Result]:
    """Medians per (B, engine), with ratios against mlx-lm's engines at the same B."""
    groups: dict[tuple[int, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.batch, run.engine), []).append(run)
    median_step = {key: statistics.median(r.step_s for r in rs) for key, rs in groups.items()}
    reference_step = {(r.batch, r.repeat): r.step_s for r in runs if r.engine == BATCH_GENERATOR}
    l1_step = {(r.batch, r.repeat): r.step_s for r in runs if r.engine == L1}
    results = []
    for (batch, engine), rs in groups.items():
        step = median_step[(batch, engine)]
        steps = [r.step_s for r in rs]
        single = median_step.get((1, GENERATE_STEP)) if batch == 1 else None
        paired = [reference_step[(batch, r.repeat)] / r.step_s for r in rs
                  if engine != BATCH_GENERATOR and (batch, r.repeat) in reference_step]
        over_l1 = [r.step_s / l1_step[(batch, r.repeat)] for r in rs
                   if engine != L1 and (batch, r.repeat) in l1_step]
        results.append(Result(
            model=model, backend=backend, engine=engine, batch=batch,
            prompt_len=spec.prompt_len, gen_len=spec.gen_len, repeats=len(rs),
            ms_step=step * 1e3, ms_step_min=min(steps) * 1e3, ms_step_max=max(steps) * 1e3,
            tok_s=batch / step, tok_s_row=1 / step,
            prefill_tok_s=statistics.median(r.prefill_tok_s for r in rs),
            peak_gb=max(r.peak_bytes for r in rs) / 1e9,
            ratio_vs_mlx_lm=median_step[(batch, BATCH_GENERATOR)] / step,
            ratio_min=min(paired) if paired else None,
            ratio_max=max(paired) if paired else None,
            slower_p=slower_p(paired),
            ratio_vs_generate_step=single / step if single else None,
            roofline_pct=100 * bound_s / step if bound_s else None,
            bandwidth_gbs=bandwidth / 1e9 if bandwidth else None,
            streamed_gb=streamed_bytes / 1e9,
            mlx=versions["mlx"], mlx_lm=versions["mlx_lm"],
            l1_ratio=statistics.median(over_l1) if over_l1 else None,
            l1_ratio_min=min(over_l1) if over_l1 else None,
            l1_ratio_max=max(over_l1) if over_l1 else None,
        ))  # fmt: skip
    return sorted(results, key=lambda r: (r.batch, _engine_order(r.engine)))


SLOWER_ALPHA = 0.05  # a ratio cell is marked slower below this p-value


def slower_p(ratios: list[float]) -> float | None:
    """p-value of "slower than BatchGenerator" from paired per-repeat ratios (one-sided
    Wilcoxon signed-rank on their logs). None with fewer than 5 pairs: below that the
    test cannot reach 0.05 however the repeats fall (5 pairs: p >= 1/32)."""
    if len(ratios) < 5:
        return None
    logs = np.log(ratios)
    if not np.any(logs):
        return 1.0  # every repeat a dead heat
    from scipy.stats import wilcoxon

    return float(wilcoxon(logs, alternative="less").pvalue)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order. A path's B cells are one
    family ("is it slower at any B?"): tested one by one at 0.05, nine cells that are
    ties would flag at least one in 25% of sweeps (with 5 repeats a tie loses all five,
    p = 1/32, with chance 1/32 per cell: 1 - (31/32)^9)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def repeats_for_family(cells: int) -> int:
    """Repeats a family of ``cells`` tests needs before its smallest adjusted p-value
    (``cells * 2**-repeats``, every repeat lost) can fall below ``SLOWER_ALPHA``."""
    repeats = 5
    while cells * 0.5**repeats >= SLOWER_ALPHA:
        repeats += 1
    return repeats


def _engine_order(engine: str) -> tuple[int, str]:
    rank = {BATCH_GENERATOR: 1, GENERATE_STEP: 2}
    return rank.get(engine, 0), engine
