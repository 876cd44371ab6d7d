"""EngineWorker: everything the engine thread owns, and one turn of its loop.

Only the engine thread calls into a worker, so nothing here takes a lock: the scheduler
and its batch caches, the waiting and running jobs, the rows' samplers, and the prompt
cache (fetched at admission, filled when a row ends). Handlers see it through the
``EngineStats`` snapshot the thread publishes. One turn:

1. takes the messages the handlers queued (``take``: submit, cancel, shutdown);
2. ``admit``: waiting jobs enter the scheduler (``admission.admissible``: the decode
   concurrency and the KV budget, oldest first). A job whose prompt starts with a
   cached sequence joins with that cache and prefills only the rest (``prompt_cache.py``);
3. ``step``: one ``scheduler.step()``, with at most ``prefill_budget`` prompt tokens
   prefilled in it (``admission.chunk_width``), and each emitted token handed to its
   job. A row that ends by its stop token or ``max_tokens`` (or by a stop string) leaves
   its caches, prompt and emitted tokens, to the prompt cache.

Faults. Every job gets exactly one ``Done``, whatever raises: ``_end`` sends it last,
in a ``finally``. A fault in one row's own work (its token's logprobs, its prompt-cache
entry) ends that row alone, or nothing at all when its answer is whole (a cache entry
that cannot be kept is just not kept); the fault is recorded (``last_fault``: the
server's health reads it). A step that raises is the scheduler's: every row in it ends
with the error, the prompt cache is emptied (an entry may be what broke the step), and
a fresh scheduler takes the waiting jobs, which never touched the broken one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import mlx.core as mx
from mlx import nn

from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.cost import ring_width
from batchlab.engine.core.history import History
from batchlab.engine.core.sampler import RowSampler
from batchlab.engine.core.scheduler import Scheduler, engine_stream
from batchlab.serve import admission
from batchlab.serve.budget import RowCost
from batchlab.serve.job import Done, GuardedSampler, Job, Token
from batchlab.serve.paged_stats import block_stats
from batchlab.serve.prompt_cache import PromptCache
from batchlab.serve.stats import EngineStats

log = logging.getLogger("batchlab.serve.engine_thread")


class EngineWorker:
    def __init__(self, model: nn.Module, *, scheduler_class: type[Scheduler],
                 config: ScheduleConfig, max_batch: int, row_cost: RowCost,
                 kv_budget: int | None, sampler_factory: Callable[[Job], RowSampler],
                 prompt_cache: PromptCache, fixed_chunks: bool = False):
        self.model, self.scheduler_class, self.config = model, scheduler_class, config
        self.max_batch, self.row_cost, self.kv_budget = max_batch, row_cost, kv_budget
        self.sampler_factory, self.prompt_cache = sampler_factory, prompt_cache
        self.prefill_budget, self.fixed_chunks = config.prefill_step_size, fixed_chunks
        self.scheduler = self._new_scheduler()
        self.waiting: list[Job] = []
        self.running: dict[str, Job] = {}
        self.samplers: dict[str, GuardedSampler] = {}
        self.deadline: float | None = None  # rows still running then end with "shutdown"
        self.tokens = self.steps = self.peak = self.crashes = self.prompt_tokens = 0
        self.prefilled = self.row_faults = 0
        self.last_fault: tuple[float, str] | None = None  # (monotonic time, what)

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
                self._send(item, Done("cancelled"))
            elif item.name in self.running:
                self._end(item, Done("cancelled"), evict=True, keep=kind == "cancel-keep")

    # -- one turn -----------------------------------------------------------------------

    def admit(self, now: float) -> None:
        """End everything past the shutdown deadline, then admit what fits."""
        if self.deadline is not None and now >= self.deadline:
            for job in [*self.waiting, *self.running.values()]:
                self._end(job, Done("shutdown", "the server shut down before this request "
                                    "finished"), evict=True)
            self.waiting.clear()
        n = admission.admissible(self.waiting, list(self.running.values()),
                                 max_batch=self.max_batch, kv_budget=self.kv_budget,
                                 row_cost=self.row_cost, ring_now=self._ring_now())
        if n:
            admitted, self.waiting = self.waiting[:n], self.waiting[n:]
            self._insert(admitted)

    def step(self) -> bool:
        """One scheduler step; False when there was nothing to step (the loop may sleep)."""
        scheduler = self.scheduler
        if not scheduler.num_active:
            return False
        admission.set_chunk_width(scheduler, admission.chunk_width(
            scheduler, self.prefill_budget, fixed=self.fixed_chunks))
        left = admission.prefill_left(scheduler)[1]
        emissions = scheduler.step()
        self.prefilled += left - admission.prefill_left(scheduler)[1]
        self.steps += 1
        self.peak = max(self.peak, len(scheduler.decode))
        rows = len(emissions)  # a step emits one token for every row of its decode batch
        for emission in emissions:
            job = self.running.get(emission.name)
            if job is not None:  # else cancelled while its token was in flight
                job.peak_rows = max(job.peak_rows, rows)
                job.shared_steps += rows > 1
                self._emit(job, emission)
        for name, guard in list(self.samplers.items()):  # a fault seen by this step's draw
            job = self.running.get(name)
            if guard.error is not None and job is not None:
                self._end(job, Done("error", f"this request's sampler failed: {guard.error}"),
                          evict=True)
        return True

    def recover(self, error: str) -> None:
        """After a step that raised: fail the rows in flight, start a fresh scheduler."""
        self.crashes += 1
        self.last_fault = (time.monotonic(), error)
        self.scheduler = None  # nothing below may touch the broken one
        for job in list(self.running.values()):
            self._end(job, Done("error", f"the engine failed: {error}"))
        self.samplers.clear()
        self.prompt_cache.clear()
        self.scheduler = self._new_scheduler()

    def fail_all(self, error: str) -> None:
        """The last resort (the engine thread is stopping): every job, waiting or not,
        ends with the error; nothing here touches the scheduler."""
        for job in [*self.waiting, *self.running.values()]:
            self._send(job, Done("error", error))
        self.waiting.clear()
        self.running.clear()

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
        scheduler = self.scheduler
        prefilling, left = admission.prefill_left(scheduler) if scheduler else (0, 0)
        return EngineStats(
            running=len(running), decoding=len(scheduler.decode) if scheduler else 0,
            prefilling=prefilling, prefill_tokens_left=left, waiting=len(self.waiting),
            waiting_prompt_tokens=sum(len(j.prompt) for j in self.waiting),
            max_batch=self.max_batch, peak_decoding=self.peak,
            projected_kv_bytes=admission.projected_bytes(self.row_cost, running,
                                                         self._ring_now()),
            kv_budget=self.kv_budget, prefill_budget=self.prefill_budget,
            tokens_generated=self.tokens, prefilled_tokens=self.prefilled,
            steps=self.steps, crashes=self.crashes, row_faults=self.row_faults,
            prompt_tokens=self.prompt_tokens, cached_prompt_tokens=cache.cached_tokens,
            prompt_cache_hits=cache.hits, prompt_cache_misses=cache.misses,
            prompt_cache_entries=cache.entries, prompt_cache_bytes=cache.nbytes,
            prompt_cache_max_entries=cache.max_entries, prompt_cache_max_bytes=cache.max_bytes,
            blocks=block_stats(self.scheduler))

    def _ring_now(self) -> int:
        """The columns the decode batch's rings hold now (0 without a batch or a ring)."""
        return ring_width(self.scheduler.decode.caches) if self.scheduler else 0

    # -- the rows -----------------------------------------------------------------------

    def _insert(self, admitted: list[Job]) -> None:
        requests = []
        for job in admitted:
            self.running[job.name] = job
            self.prompt_tokens += len(job.prompt)
            history = self._guarded(job, "its prompt-cache lookup",
                                    lambda j=job: self.prompt_cache.fetch(j.prompt))
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

    def _emit(self, job: Job, emission) -> None:
        guard = self.samplers.get(job.name)
        if guard is not None and guard.error is not None:
            self._end(job, Done("error", f"this request's sampler failed: {guard.error}"),
                      evict=True)
            return
        try:
            token = _token(job, emission)
        except Exception as err:  # noqa: BLE001 - this row's own work: it ends alone
            self._fault(f"a row's token failed: {type(err).__name__}: {err}")
            self._end(job, Done("error", f"{type(err).__name__}: {err}"), evict=True)
            return
        job.num_tokens += 1
        self.tokens += 1
        job.sink(token)
        if emission.token in job.stop_ids:
            self._end(job, Done("stop"), evict=True, keep=True, history=emission.history)
        elif emission.finished:
            self._end(job, Done("length"), keep=True, history=emission.history)

    def _end(self, job: Job, done: Done, *, evict: bool = False, keep: bool = False,
             history: History | None = None) -> None:
        """End a job; a row still in the scheduler is evicted before the next step.
        ``keep``: its caches go to the prompt cache (``history`` when the scheduler
        already handed them back; a row that emitted nothing keeps nothing). The job's
        ``Done`` goes out whatever raises here."""
        self.running.pop(job.name, None)
        self.samplers.pop(job.name, None)
        keep = keep and self.prompt_cache.enabled and job.num_tokens > 0
        try:
            if evict and self.scheduler is not None:
                kept = self.scheduler.remove([job.name], keep_history=keep and history is None)
                history = history or kept.get(job.name)
            if keep and history is not None:
                self._guarded(job, "keeping its caches",
                              lambda: self.prompt_cache.insert(history))
        finally:
            self._send(job, done)

    def _guarded(self, job: Job, what: str, work: Callable):
        """A prompt-cache operation for one row: a fault is logged and recorded, and the
        row goes on without the cache (None)."""
        try:
            return work()
        except Exception as err:
            self._fault(f"{job.name}: {what} failed: {type(err).__name__}: {err}")
            log.exception("prompt cache fault (%s, %s); the row goes on without it",
                          job.name, what)
            return None

    def _fault(self, what: str) -> None:
        self.row_faults += 1
        self.last_fault = (time.monotonic(), what)

    def _send(self, job: Job, done: Done) -> None:
        if not job.finished:  # one Done a job, however it ends
            job.finished = True
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
