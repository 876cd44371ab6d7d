"""``batchlab bench profile``: where a decode step's time goes, per engine.

Each engine runs its usual driver (``engines.py``: the same prompts, schedule and
pipelined loop as the bench), and during the decode window only three hooks split the
wall time of a step:

    forward build  inside the model's ``__call__`` (or ``fast``'s flat forward,
                   ``flat_decode.flat_logits``, or its one-row chain or one-kernel
                   step, ``chain_decode.RowChain.logits`` /
                   ``persistent_decode.RowStep.logits``): Python walking the modules and
                   recording lazy ops (no device work happens there)
    submit         inside ``mx.async_eval`` / ``mx.eval``: MLX encoding the graph and
                   launching its kernels (``mx.eval`` also waits for them)
    rest           the step minus both: the engine's own Python (scheduling, masks,
                   sampling) and the wait for the previous step's tokens

A second run of each engine syncs the device after every submit, so nothing overlaps:
its ``device wait`` is the device time the host did not hide, and its step the
unpipelined cost. When build + submit + rest (host) is close to the pipelined step,
the step is bound by the host, and kernels that run faster would not shorten it.

The hooks patch ``type(model).__call__``, ``flat_decode.flat_logits``,
``chain_decode.RowChain.logits``, ``persistent_decode.RowStep.logits`` and
``mlx.core.async_eval`` / ``eval`` for the window and restore them after; mlx-lm's loops
and the engine look them up at call time. Each hook is a plain call around the
original, a few per step.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import mlx.core as mx
from mlx import nn

from batchlab.bench.engines import Driver, engines_at, sync
from batchlab.bench.measure import BenchSpec, gc_paused, interleaved
from batchlab.engine.paths.fast import chain_decode, flat_decode, persistent_decode


@dataclass(slots=True)
class _Clock:
    """Seconds a window spent in each hook."""

    build: float = 0.0
    submit: float = 0.0
    wait: float = 0.0


@contextmanager
def timing_hooks(model: nn.Module, clock: _Clock, sync_after_submit: bool) -> Iterator[None]:
    cls = type(model)
    forward, async_eval, eval_ = cls.__call__, mx.async_eval, mx.eval
    flat, chain = flat_decode.flat_logits, chain_decode.RowChain.logits
    row_step = persistent_decode.RowStep.logits

    def built(fn):
        def timed_build(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                clock.build += time.perf_counter() - start
        return timed_build

    def timed(submit_fn, *arrays):
        start = time.perf_counter()
        submit_fn(*arrays)
        submitted = time.perf_counter()
        clock.submit += submitted - start
        if sync_after_submit:
            sync()
            clock.wait += time.perf_counter() - submitted

    cls.__call__, flat_decode.flat_logits = built(forward), built(flat)
    chain_decode.RowChain.logits = built(chain)
    persistent_decode.RowStep.logits = built(row_step)
    mx.async_eval, mx.eval = partial(timed, async_eval), partial(timed, eval_)
    try:
        yield
    finally:
        cls.__call__, flat_decode.flat_logits = forward, flat
        chain_decode.RowChain.logits = chain
        persistent_decode.RowStep.logits = row_step
        mx.async_eval, mx.eval = async_eval, eval_


@dataclass(frozen=True, slots=True, kw_only=True)
class StepProfile:
    """One engine at one B: medians over the repeats, in ms per decode step."""

    engine: str
    batch: int
    repeats: int
    step_ms: float  # pipelined (the bench's figure)
    build_ms: float
    submit_ms: float
    rest_ms: float  # step - build - submit
    synced_step_ms: float  # a device sync after every submit: no overlap
    wait_ms: float  # inside those syncs: device time the host did not hide


def _profile_run(drive: Driver, model: nn.Module, prompts: list[list[int]], gen_len: int,
                 synced: bool) -> tuple[float, _Clock]:
    clock = _Clock()
    with gc_paused():
        run = drive(model, prompts, gen_len,
                    window=partial(timing_hooks, model, clock, synced))
    n = run.decode_steps
    return run.step_s, _Clock(build=clock.build / n, submit=clock.submit / n,
                              wait=clock.wait / n)


def num_runs(spec: BenchSpec) -> int:
    """Every run ``profile`` makes (the progress bar's total)."""
    per_b = [len(engines_at(spec.paths, b)) for b in spec.batches]
    return sum(per_b) * (2 * spec.repeats + 1)


def profile(model: nn.Module, spec: BenchSpec, vocab_size: int,
            on_run=None) -> list[StepProfile]:
    """Per B: a warm-up per engine, then ``spec.repeats`` rounds, engines rotated as in
    the bench, each a pipelined and a synced run."""
    out = []
    for batch in spec.batches:
        samples: dict[str, list[tuple]] = {}
        for r, name, drive, prompts in interleaved(model, spec, batch, vocab_size, on_run):
            label = f"repeat {r + 1}/{spec.repeats}"
            if on_run:
                on_run(name, batch, label)
            step, clock = _profile_run(drive, model, prompts, spec.gen_len, synced=False)
            if on_run:
                on_run(name, batch, label + " synced")
            synced_step, synced = _profile_run(drive, model, prompts, spec.gen_len,
                                               synced=True)
            samples.setdefault(name, []).append((
                step, clock.build, clock.submit, step - clock.build - clock.submit,
                synced_step, synced.wait))
        for name, rows in samples.items():
            med = [statistics.median(col) * 1e3 for col in zip(*rows)]
            out.append(StepProfile(engine=name, batch=batch, repeats=spec.repeats,
                                   step_ms=med[0], build_ms=med[1], submit_ms=med[2],
                                   rest_ms=med[3], synced_step_ms=med[4], wait_ms=med[5]))
    return out


def markdown(model_name: str, backend: str, spec: BenchSpec,
             profiles: list[StepProfile], versions: str) -> str:
    from batchlab.bench.report import sig

    intro = (
        f"Prompt {spec.prompt_len}, {spec.gen_len} generated tokens per row, greedy; "
        f"medians of {spec.repeats} repeats after a warm-up. {versions}. Columns are ms "
        "per decode step (share of the pipelined step). `forward build`: Python "
        "recording the model's lazy graph; `submit`: MLX encoding and launching it "
        "(`mx.async_eval`); `rest`: the engine's own Python and the wait for the last "
        "step's tokens (the compiled path's trace replay lands here too). The synced run "
        "syncs the device after every submit: `device wait` is device time the host did "
        "not hide. Regenerate with `batchlab bench profile` (`batchlab/bench/profile.py`).")
    header = ("| B | engine | ms/step | forward build | submit | rest | synced ms/step "
              "| device wait |")
    lines = [f"# Where a decode step goes: {model_name} on {backend}", "", intro, "",
             header, "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in profiles:
        def share(ms: float, step_ms: float = p.step_ms) -> str:
            return f"{sig(ms)} ({100 * ms / step_ms:.0f}%)"

        lines.append(f"| {p.batch} | {p.engine} | {sig(p.step_ms)} | {share(p.build_ms)} "
                     f"| {share(p.submit_ms)} | {share(p.rest_ms)} "
                     f"| {sig(p.synced_step_ms)} | {sig(p.wait_ms)} |")
    return "\n".join(lines) + "\n"
