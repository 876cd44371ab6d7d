"""One timed run of each engine: B prompts of P tokens, T greedy tokens each.

Every run splits its wall time at the moment every row has its first token computed:

    insert ... prefill ... first decode step   | sync |  T more steps ...  | sync |
    <------------- prefill_s ------------------>      <---- decode_s ------>

so ``decode_s / decode_steps`` is a decode step with no prefill in it, and both sides
of the split end with a device sync (the pipelined loops leave a forward in flight; a
sync before the window starts makes the window hold exactly its own forwards).

The batch engines run with ``prefill_batch_size = completion_batch_size = B``: all rows
are prefilled in one forward and decode together, so a run measures a decode step at B
(mlx-lm's defaults, 8 and 32, would admit rows in waves and cap B at 32).
Emissions are counted, never read: their logprobs stay lazy, unconverted.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import mlx.core as mx
from mlx import nn

from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.registry import PATHS as ENGINE_PATHS
from batchlab.engine.paths.registry import EnginePath

BATCH_GENERATOR = "BatchGenerator"
GENERATE_STEP = "generate_step"
L1 = "l1"  # the path every other one is set beside (bench tables, paired ratios)
MAX_SETUP_STEPS = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    engine: str
    batch: int
    prompt_len: int
    prefill_s: float  # insert -> every row's first token computed (incl. that forward)
    decode_s: float
    decode_steps: int
    peak_bytes: int  # mx.get_peak_memory over the run, weights included
    repeat: int = -1  # which interleaved repeat of the sweep (-1: not part of one)

    @property
    def step_s(self) -> float:
        return self.decode_s / self.decode_steps

    @property
    def tok_s(self) -> float:
        """Aggregate decode throughput: every row emits one token per step."""
        return self.batch / self.step_s

    @property
    def prefill_tok_s(self) -> float:
        return self.batch * self.prompt_len / self.prefill_s


# A driver runs one engine: (model, prompts, gen_len, window=...) -> Run. ``window`` is
# entered around the decode window only (the profiler's hooks; ``bench/profile.py``).
Driver = Callable[..., Run]
Window = Callable[[], AbstractContextManager]


def sync() -> None:
    from mlx_lm.generate import generation_stream  # mlx-lm's engines run on this stream

    mx.synchronize()
    mx.synchronize(generation_stream)


def _begin() -> float:
    """Start a run from a clean slate: no garbage, no cached buffers, peak reset."""
    gc.collect()
    sync()
    mx.clear_cache()
    mx.reset_peak_memory()
    return time.perf_counter()


def _check(engine: str, emitted: int, expected: int) -> None:
    if emitted != expected:
        raise RuntimeError(f"{engine} emitted {emitted} tokens, expected {expected}")


def path_driver(path: EnginePath) -> Driver:
    """The driver that times one batchlab path (its scheduler, gated in the matrix)."""

    def run(model: nn.Module, prompts: list[list[int]], gen_len: int,
            window: Window = nullcontext) -> Run:
        return _run_scheduler(path.name, path.scheduler, model, prompts, gen_len, window)

    run.__name__ = run.__qualname__ = f"run_{path.name}"
    return run


def _run_scheduler(engine: str, kind: type[Scheduler], model: nn.Module,
                   prompts: list[list[int]], gen_len: int, window: Window) -> Run:
    B = len(prompts)
    scheduler = kind(model, ScheduleConfig(prefill_batch_size=B, completion_batch_size=B))
    requests = [Request(name=f"r{i}", prompt=tuple(p), max_tokens=gen_len)
                for i, p in enumerate(prompts)]
    start = _begin()
    scheduler.insert(requests)
    emitted = 0
    for _ in range(MAX_SETUP_STEPS):
        emitted += len(scheduler.step())
        if len(scheduler.decode) == B:
            break
    sync()
    ready = time.perf_counter()
    steps = 0
    with window():
        while scheduler.num_active:
            emitted += len(scheduler.step())
            steps += 1
        sync()
    end = time.perf_counter()
    _check(engine, emitted, B * gen_len)
    return Run(engine=engine, batch=B, prompt_len=len(prompts[0]), prefill_s=ready - start,
               decode_s=end - ready, decode_steps=steps, peak_bytes=mx.get_peak_memory())


def run_batch_generator(model: nn.Module, prompts: list[list[int]], gen_len: int,
                        window: Window = nullcontext) -> Run:
    """mlx-lm's BatchGenerator, greedy, no stop tokens (rows end at ``gen_len``)."""
    from mlx_lm.generate import BatchGenerator

    B = len(prompts)
    generator = BatchGenerator(model, max_tokens=gen_len, prefill_batch_size=B,
                               completion_batch_size=B)
    try:
        start = _begin()
        generator.insert(prompts, max_tokens=[gen_len] * B)
        joined = emitted = finished = 0
        for _ in range(MAX_SETUP_STEPS):
            prompt_responses, responses = generator.next()
            joined += sum(r.end_of_prompt for r in prompt_responses)
            emitted += len(responses)
            if joined == B:
                break
        sync()
        ready = time.perf_counter()
        steps = 0
        with window():
            while finished < B:
                _, responses = generator.next()
                emitted += len(responses)
                finished += sum(r.finish_reason is not None for r in responses)
                steps += 1
            sync()
        end = time.perf_counter()
    finally:
        generator.close()
    _check(BATCH_GENERATOR, emitted, B * gen_len)
    return Run(engine=BATCH_GENERATOR, batch=B, prompt_len=len(prompts[0]),
               prefill_s=ready - start, decode_s=end - ready, decode_steps=steps,
               peak_bytes=mx.get_peak_memory())


def run_generate_step(model: nn.Module, prompts: list[list[int]], gen_len: int,
                      window: Window = nullcontext) -> Run:
    """mlx-lm's single-stream loop (plain KVCache, async_eval pipelined); B=1 only.

    Its first ``next()`` prefills and computes token 0 (and queues token 1); the window
    then holds the remaining ``gen_len - 1`` yields, one forward each."""
    from mlx_lm.generate import generate_step

    if len(prompts) != 1:
        raise ValueError("generate_step is single-stream: run it at B=1 only")
    if gen_len < 2:
        raise ValueError("generate_step needs --gen-len >= 2 (one token is prefill's)")
    start = _begin()
    tokens = generate_step(mx.array(prompts[0]), model, max_tokens=gen_len)
    next(tokens)
    sync()
    ready = time.perf_counter()
    with window():
        steps = sum(1 for _ in tokens)
        sync()
    end = time.perf_counter()
    _check(GENERATE_STEP, steps + 1, gen_len)
    return Run(engine=GENERATE_STEP, batch=1, prompt_len=len(prompts[0]),
               prefill_s=ready - start, decode_s=end - ready, decode_steps=steps,
               peak_bytes=mx.get_peak_memory())


# batchlab paths (--paths): one driver per entry of the engine's path registry
PATHS: dict[str, Driver] = {name: path_driver(p) for name, p in ENGINE_PATHS.items()}
REFERENCES: dict[str, Driver] = {BATCH_GENERATOR: run_batch_generator,
                                 GENERATE_STEP: run_generate_step}


def engines_at(paths: tuple[str, ...], batch: int) -> list[tuple[str, Driver]]:
    """The engines a B runs: the paths, BatchGenerator, and generate_step at B=1."""
    engines = [(p, PATHS[p]) for p in paths] + [(BATCH_GENERATOR, run_batch_generator)]
    if batch == 1:
        engines.append((GENERATE_STEP, run_generate_step))
    return engines
