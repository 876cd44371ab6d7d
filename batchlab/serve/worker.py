"""EngineWorker: everything the engine thread owns, and one turn of its loop.

Only the engine thread calls into a worker, so nothing here takes a lock: the scheduler
and its batch caches, the waiting and running jobs, the rows' samplers, and the prompt
cache (fetched at admission, filled when a row ends). Handlers see it through the
``EngineStats`` snapshot the thread publishes after each turn. One turn:

1. takes the messages the handlers queued (``take``: submit, cancel, shutdown);
2. admits waiting jobs, oldest first, while fewer than ``max_batch`` rows are in the
   scheduler and the projected KV bytes stay within ``kv_budget`` (``budget.RowCost``);
   the first that does not fit waits, and so does everything behind it (no overtaking,
   so no job starves). A job whose prompt starts with a cached sequence joins with that
   cache and prefills only the rest (``prompt_cache.py``);
3. runs one ``scheduler.step()`` and hands each emitted token to its job. A row that ends
   by its stop token or ``max_tokens`` (or by a stop string) leaves its caches, prompt
   and emitted tokens, to the prompt cache; a cancelled or failed row leaves nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
from mlx import nn

from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.history import History
from batchlab.engine.core.sampler import RowSampler
from batchlab.engine.core.scheduler import Scheduler, engine_stream
from batchlab.serve.budget import RowCost
from batchlab.serve.job import Done, GuardedSampler, Job, Token
from batchlab.serve.paged_stats import block_stats
from batchlab.serve.prompt_cache import PromptCache


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineStats:
    running: int  # jobs in the scheduler (prefilling or decoding), never over max_batch
    decoding: int  # rows in the scheduler's decode batch
    waiting: int  # jobs held back by max_batch or the KV budget
    max_batch: int
    peak_decoding: int  # the largest decode batch so far (batching is visible here)
    projected_kv_bytes: int
    kv_budget: int | None
    tokens_generated: int
    steps: int
    crashes: int
    prompt_tokens: int  # of every admitted job, cached or not
    cached_prompt_tokens: int  # of those, the ones a prompt-cache hit did not prefill
    prompt_cache_hits: int
    prompt_cache_misses: int
    prompt_cache_entries: int
    prompt_cache_bytes: int  # held apart from the batch: not in projected_kv_bytes
    prompt_cache_max_entries: int
    prompt_cache_max_bytes: int | None
    blocks: dict | None = None  # the paged path's block counts (serve/paged_stats.py)


class EngineWorker:
    def __init__(self, model: nn.Module, *, scheduler_class: type[Scheduler],
                 config: ScheduleConfig, max_batch: int, row_cost: RowCost,
                 kv_budget: int | None, sampler_factory: Callable[[Job], RowSampler],
                 prompt_cache: PromptCache):
        self.model, self.scheduler_class, self.config = model, scheduler_class, config
        self.max_batch, self.row_cost, self.kv_budget = max_batch, row_cost, kv_budget
        self.sampler_factory, self.prompt_cache = sampler_factory, prompt_cache
        self.scheduler = self._new_scheduler()
        self.waiting: list[Job] = []
        self.running: dict[str, Job] = {}
        self.samplers: dict[str, GuardedSampler] = {}
        self.deadline: float | None = None  # rows still running then end with "shutdown"
        self.tokens = self.steps = self.peak = self.crashes = self.prompt_tokens = 0

    def _new_scheduler(self) -> Scheduler:
        scheduler = self.scheduler_class(self.model, self.config)
        scheduler.keep_finished_histories = self.prompt_cache.enabled
        return scheduler

    # -- messages from the handlers -----------------------------------------------------

    def take(self, kind: str, item) -> None:
        if kind == "submit":
            self.waiting.append(item)
        elif kind == "shutdown":
            self.deadline = item
        else:  # "cancel" or "cancel-keep" (a stop string: the row's caches are good)
            if item in self.waiting:
                self.waiting.remove(item)
                item.sink(Done("cancelled"))
            elif item.name in self.running:
                self._end(item, Done("cancelled"), evict=True, keep=kind == "cancel-keep")

    # -- one turn -----------------------------------------------------------------------

    def turn(self, now: float) -> bool:
        """Admit and step; False when there was nothing to step (the loop may sleep)."""
        if self.deadline is not None and now >= self.deadline:
            for job in [*self.waiting, *self.running.values()]:
                self._end(job, Done("shutdown", "the server shut down before this request "
                                    "finished"), evict=True)
            self.waiting.clear()
        self._admit()
        if not self.scheduler.num_active:
            return False
        self._step()
        return True

    def recover(self, error: str) -> None:
        """After a step that raised: fail the rows in flight, start a fresh scheduler."""
        self.crashes += 1
        for job in list(self.running.values()):
            self._end(job, Done("error", f"the engine failed: {error}"))
        self.scheduler = self._new_scheduler()
        self.samplers.clear()

    def release(self) -> None:
        """At the end of the thread: a decode step leaves the next step's forward queued
        (pipelined); finish it, or the process aborts at exit with MLX's stream busy."""
        self.scheduler = None  # drop the batches' arrays, then wait for both streams
        self.prompt_cache.clear()
        mx.synchronize(engine_stream())
        mx.synchronize()

    def snapshot(self) -> EngineStats:
        running = list(self.running.values())
        cache = self.prompt_cache.stats()
        return EngineStats(
            running=len(running), decoding=len(self.scheduler.decode),
            waiting=len(self.waiting), max_batch=self.max_batch, peak_decoding=self.peak,
            projected_kv_bytes=self.projected(running), kv_budget=self.kv_budget,
            tokens_generated=self.tokens, steps=self.steps, crashes=self.crashes,
            prompt_tokens=self.prompt_tokens, cached_prompt_tokens=cache.cached_tokens,
            prompt_cache_hits=cache.hits, prompt_cache_misses=cache.misses,
            prompt_cache_entries=cache.entries, prompt_cache_bytes=cache.nbytes,
            prompt_cache_max_entries=cache.max_entries, prompt_cache_max_bytes=cache.max_bytes,
            blocks=block_stats(self.scheduler))

    def projected(self, jobs: list[Job]) -> int:
        return self.row_cost.batch_bytes([j.projected_tokens for j in jobs])

    def _admit(self) -> None:
        admitted = []
        running = list(self.running.values())
        for job in self.waiting:
            if len(running) >= self.max_batch or (
                    self.kv_budget is not None
                    and self.projected([*running, job]) > self.kv_budget):
                break  # first come, first served: nothing overtakes this job
            running.append(job)
            admitted.append(job)
        if not admitted:
            return
        self.waiting = self.waiting[len(admitted):]
        requests = []
        for job in admitted:
            self.running[job.name] = job
            self.prompt_tokens += len(job.prompt)
            history = self.prompt_cache.fetch(job.prompt)
            job.cached_tokens = len(history.tokens) if history else 0
            requests.append(Request(name=job.name, prompt=job.prompt[job.cached_tokens:],
                                    max_tokens=job.max_tokens, sampling=job.sampling,
                                    processors=job.processors, history=history))
        self.scheduler.insert(requests)
        jobs = {j.name: j for j in admitted}
        for seq in self.scheduler.queue:  # each new row samples through its own guard
            job = jobs.get(seq.name)
            if job is not None:
                try:
                    seq.sampler = self.samplers[job.name] = GuardedSampler(
                        self.sampler_factory(job))
                except Exception as err:  # noqa: BLE001 - a row that cannot start ends alone
                    self._end(job, Done("error", f"{type(err).__name__}: {err}"), evict=True)

    def _step(self) -> None:
        emissions = self.scheduler.step()
        self.steps += 1
        self.peak = max(self.peak, len(self.scheduler.decode))
        for emission in emissions:
            job = self.running.get(emission.name)
            if job is None:  # cancelled while its token was in flight
                continue
            guard = self.samplers.get(job.name)
            if guard is not None and guard.error is not None:
                self._end(job, Done("error", f"this request's sampler failed: {guard.error}"),
                          evict=True)
                continue
            job.num_tokens += 1
            self.tokens += 1
            job.sink(_token(job, emission))
            if emission.token in job.stop_ids:
                self._end(job, Done("stop"), evict=True, keep=True, history=emission.history)
            elif emission.finished:
                self._end(job, Done("length"), keep=True, history=emission.history)
        for name, guard in list(self.samplers.items()):  # a fault seen by this step's draw
            job = self.running.get(name)
            if guard.error is not None and job is not None:
                self._end(job, Done("error", f"this request's sampler failed: {guard.error}"),
                          evict=True)

    def _end(self, job: Job, done: Done, *, evict: bool = False, keep: bool = False,
             history: History | None = None) -> None:
        """End a job; a row still in the scheduler is evicted before the next step.
        ``keep``: its caches go to the prompt cache (``history`` when the scheduler
        already handed them back; a row that emitted nothing keeps nothing)."""
        self.running.pop(job.name, None)
        self.samplers.pop(job.name, None)
        keep = keep and self.prompt_cache.enabled and job.num_tokens > 0
        if evict:
            kept = self.scheduler.remove([job.name], keep_history=keep and history is None)
            history = history or kept.get(job.name)
        if keep and history is not None:
            self.prompt_cache.insert(history)
        job.sink(done)


def _token(job: Job, emission) -> Token:
    if job.logprobs is None:
        return Token(emission.token)
    row = emission.logprobs.astype(mx.float32)
    k = job.logprobs
    if k:
        top = mx.argsort(-row)[:k]
        pairs = tuple(zip(top.tolist(), row[top].tolist()))
    else:
        pairs = ()
    return Token(emission.token, row[emission.token].item(), pairs)
