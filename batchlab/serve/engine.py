"""ServeEngine: one thread owns a scheduler; request handlers hand it jobs and get events.

Only the engine thread touches MLX. A handler calls ``submit`` (which checks the job and
queues it at once); the engine calls ``job.sink(event)`` from its own thread for every
``Token`` and one final ``Done`` (the HTTP layer's sink moves them onto its event loop).
``cancel`` evicts a job wherever it is. Each turn of the engine loop:

1. takes new jobs and cancellations from the inbox;
2. admits waiting jobs, oldest first, while fewer than ``max_batch`` rows are in the
   scheduler and the projected KV bytes stay within ``kv_budget`` (``budget.RowCost``);
   the first that does not fit waits, and so does everything behind it (no overtaking,
   so no job starves);
3. runs one ``scheduler.step()`` and hands each emitted token to its job.

Containment: every row samples through its own ``GuardedSampler``; a sampler (or, later,
a logits processor) that raises ends that row alone with the error, and the step goes on
with a placeholder token the row never sees. A step that raises anyway (a bug the rows
cannot be blamed for) is logged with its traceback, fails the rows in flight, and the
engine goes on with a fresh scheduler; ``health()`` reports it.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx
from mlx import nn

from batchlab.engine.batch import Request
from batchlab.engine.config import ScheduleConfig
from batchlab.engine.processors import ProcessorParams
from batchlab.engine.sampler import SamplingParams
from batchlab.engine.scheduler import Scheduler, engine_stream
from batchlab.serve.budget import RowCost, measure_row_cost
from batchlab.serve.row_sampler import RowSampler

IDLE_WAIT_S = 0.05  # how long an idle engine sleeps before looking at its inbox again
log = logging.getLogger("batchlab.serve.engine")


@dataclass(frozen=True, slots=True)
class Token:
    id: int
    logprob: float | None = None  # set when the job asked for logprobs
    top: tuple[tuple[int, float], ...] = ()  # (id, logprob), most likely first


@dataclass(frozen=True, slots=True)
class Done:
    reason: str  # "stop" (a stop token), "length", "cancelled", "error", "shutdown"
    error: str | None = None


class EngineUnavailable(RuntimeError):
    """The engine is shutting down: answered with 503."""


@dataclass(slots=True, kw_only=True, eq=False)  # a job is itself, not its fields
class Job:
    name: str
    prompt: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams
    stop_ids: frozenset[int]
    sink: Callable[[Token | Done], None]
    logprobs: int | None = None  # None: none; k: the chosen token's and the top k
    processors: ProcessorParams | None = None  # penalties and logit bias
    num_tokens: int = 0
    submitted_at: float = field(default_factory=time.monotonic)

    @property
    def projected_tokens(self) -> int:
        return len(self.prompt) + self.max_tokens


class GuardedSampler:
    """A row's RowSampler that never raises into the step: a failure is recorded on the
    sampler (the engine ends the row) and a placeholder token keeps the batch's shape."""

    def __init__(self, inner: RowSampler):
        self.inner, self.params, self.error = inner, inner.params, None

    def __call__(self, logprobs: mx.array) -> mx.array:
        if self.error is None:
            try:
                return self.inner(logprobs)
            except Exception as err:  # noqa: BLE001 - any row fault ends that row alone
                self.error = f"{type(err).__name__}: {err}"
                log.warning("row sampler failed: %s", self.error)
        return mx.zeros((logprobs.shape[0],), dtype=mx.uint32)


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


class ServeEngine:
    def __init__(self, model: nn.Module, *, scheduler_class: type[Scheduler] = Scheduler,
                 max_batch: int = 32, prompt_concurrency: int = 8,
                 prefill_step_size: int = 2048, kv_budget: int | None = None,
                 vocab_size: int, stop_ids: frozenset[int] = frozenset(),
                 sampler_factory: Callable[[Job], RowSampler] | None = None):
        if max_batch < 1:
            raise ValueError("--decode-concurrency must be >= 1")
        if prompt_concurrency < 1 or prefill_step_size < 1:
            raise ValueError("--prompt-concurrency and --prefill-step-size must be >= 1")
        if kv_budget is not None and kv_budget <= 0:
            raise ValueError("--kv-budget must be a positive number of bytes")
        self.model, self.scheduler_class = model, scheduler_class
        # the scheduler decodes at most max(completion, prefill) rows: keep prefill <= max
        self.config = ScheduleConfig(prefill_batch_size=min(prompt_concurrency, max_batch),
                                     completion_batch_size=max_batch,
                                     prefill_step_size=prefill_step_size)
        self.scheduler = scheduler_class(model, self.config)
        self.max_batch = max_batch
        self.row_cost: RowCost = measure_row_cost(model)
        self.kv_budget = kv_budget
        self.vocab_size = vocab_size
        self.default_stop_ids = stop_ids
        self.sampler_factory = sampler_factory or (lambda job: RowSampler(job.sampling))
        self._inbox: queue.Queue = queue.Queue()
        self._wake = threading.Event()
        self._waiting: list[Job] = []
        self._running: dict[str, Job] = {}
        self._samplers: dict[str, GuardedSampler] = {}
        self._ids = itertools.count()  # next() on a count is atomic: submit runs on many threads
        self._tokens = self._steps = self._peak = self._crashes = 0
        self.last_crash: str | None = None
        self._stop = threading.Event()
        self._closing = False  # set by begin_shutdown: no new jobs
        self._deadline: float | None = None  # rows still running then end with "shutdown"
        self._stats = self._snapshot()
        self._thread = threading.Thread(target=self._loop, name="batchlab-engine", daemon=True)

    # -- the handlers' side -------------------------------------------------------------

    def start(self) -> ServeEngine:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=60)

    def begin_shutdown(self, grace_s: float) -> None:
        """Admit nothing new; rows still running after ``grace_s`` end with "shutdown"."""
        self._closing = True
        self._inbox.put(("shutdown", time.monotonic() + grace_s))
        self._wake.set()

    @property
    def running_thread(self) -> bool:
        """Whether the engine thread is still alive (after ``close``: it did not stop)."""
        return self._thread.is_alive()

    @property
    def idle(self) -> bool:
        s = self._stats
        return s.running == 0 and s.waiting == 0 and self._inbox.empty()

    def submit(self, job_args: dict, sink: Callable[[Token | Done], None]) -> Job:
        """Check a job and queue it. Raises ValueError (the client's fault) with what to
        change, EngineUnavailable while shutting down."""
        if self._closing:
            raise EngineUnavailable("the server is shutting down and admits no new requests")
        prompt, max_tokens = job_args["prompt"], job_args["max_tokens"]
        if not prompt:
            raise ValueError("the prompt is empty: give at least one token")
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary "
                             f"[0, {self.vocab_size})")
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        processors = job_args.get("processors")
        bias_ids = [t for t, _ in processors.logit_bias] if processors else []
        if any(not 0 <= t < self.vocab_size for t in bias_ids):
            raise ValueError(f"logit_bias token ids {bias_ids[:5]} must be inside the "
                             f"vocabulary [0, {self.vocab_size})")
        stop_ids = job_args.get("stop_ids")
        job = Job(name=f"job-{next(self._ids)}", prompt=tuple(prompt), max_tokens=max_tokens,
                  processors=processors,
                  sampling=job_args["sampling"], logprobs=job_args.get("logprobs"),
                  stop_ids=self.default_stop_ids if stop_ids is None else stop_ids, sink=sink)
        if self.kv_budget is not None:
            need = self.row_cost.batch_bytes([job.projected_tokens])
            if need > self.kv_budget:
                raise ValueError(
                    f"this request alone needs {need} bytes of KV cache ({len(prompt)} prompt "
                    f"+ {max_tokens} max_tokens), over the server's --kv-budget of "
                    f"{self.kv_budget}: lower max_tokens or shorten the prompt")
        self._inbox.put(("submit", job))
        self._wake.set()
        return job

    def cancel(self, job: Job) -> None:
        self._inbox.put(("cancel", job))
        self._wake.set()

    def stats(self) -> EngineStats:
        """The state after the engine's last turn (a snapshot: safe from any thread)."""
        return self._stats

    def health(self) -> dict:
        alive = self._thread.is_alive()
        return {"status": "ok" if alive and not self._closing else
                ("shutting_down" if alive else "failed"),
                "engine_crashes": self._crashes, "last_crash": self.last_crash}

    def _snapshot(self) -> EngineStats:
        running = list(self._running.values())
        return EngineStats(running=len(running), decoding=len(self.scheduler.decode),
                           waiting=len(self._waiting), max_batch=self.max_batch,
                           peak_decoding=self._peak, projected_kv_bytes=self._projected(running),
                           kv_budget=self.kv_budget, tokens_generated=self._tokens,
                           steps=self._steps, crashes=self._crashes)

    # -- the engine thread --------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._turn()
            except Exception:  # noqa: BLE001 - a step no row is blamed for: log, fail, go on
                self._crashes += 1
                self.last_crash = traceback.format_exc()
                log.error("engine step failed; the rows in flight end with the error:\n%s",
                          self.last_crash)
                error = self.last_crash.strip().splitlines()[-1]
                for job in list(self._running.values()):
                    self._end(job, Done("error", f"the engine failed: {error}"))
                self.scheduler = self.scheduler_class(self.model, self.config)
                self._samplers.clear()
            self._stats = self._snapshot()
        # a decode step leaves the next step's forward queued (pipelined): finish it here,
        # or the process aborts at exit with MLX's stream thread still busy
        self.scheduler = None  # drop the batches' arrays, then wait for both streams
        mx.synchronize(engine_stream())
        mx.synchronize()

    def _turn(self) -> None:
        self._read_inbox()
        if self._deadline is not None and time.monotonic() >= self._deadline:
            for job in [*self._waiting, *self._running.values()]:
                self._end(job, Done("shutdown", "the server shut down before this request "
                                    "finished"), evict=True)
            self._waiting.clear()
        self._admit()
        if not self.scheduler.num_active:
            self._stats = self._snapshot()
            self._wake.wait(IDLE_WAIT_S)
            self._wake.clear()
            return
        self._step()

    def _read_inbox(self) -> None:
        while True:
            try:
                kind, item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "submit":
                self._waiting.append(item)
            elif kind == "shutdown":
                self._deadline = item
            elif item in self._waiting:
                self._waiting.remove(item)
                item.sink(Done("cancelled"))
            elif item.name in self._running:
                self._end(item, Done("cancelled"), evict=True)

    def _admit(self) -> None:
        admitted = []
        running = list(self._running.values())
        for job in self._waiting:
            if len(running) >= self.max_batch or (
                    self.kv_budget is not None
                    and self._projected([*running, job]) > self.kv_budget):
                break  # first come, first served: nothing overtakes this job
            running.append(job)
            admitted.append(job)
        if not admitted:
            return
        self._waiting = self._waiting[len(admitted):]
        for job in admitted:
            self._running[job.name] = job
        self.scheduler.insert([Request(name=j.name, prompt=j.prompt, max_tokens=j.max_tokens,
                                       sampling=j.sampling, processors=j.processors)
                               for j in admitted])
        jobs = {j.name: j for j in admitted}
        for seq in self.scheduler.queue:  # each new row samples through its own guard
            job = jobs.get(seq.name)
            if job is not None:
                try:
                    seq.sampler = self._samplers[job.name] = GuardedSampler(
                        self.sampler_factory(job))
                except Exception as err:  # noqa: BLE001 - a row that cannot start ends alone
                    self._end(job, Done("error", f"{type(err).__name__}: {err}"), evict=True)

    def _projected(self, jobs: list[Job]) -> int:
        return self.row_cost.batch_bytes([j.projected_tokens for j in jobs])

    def _step(self) -> None:
        emissions = self.scheduler.step()
        self._steps += 1
        self._peak = max(self._peak, len(self.scheduler.decode))
        for emission in emissions:
            job = self._running.get(emission.name)
            if job is None:  # cancelled while its token was in flight
                continue
            guard = self._samplers.get(job.name)
            if guard is not None and guard.error is not None:
                self._end(job, Done("error", f"this request's sampler failed: {guard.error}"),
                          evict=True)
                continue
            job.num_tokens += 1
            self._tokens += 1
            job.sink(self._token(job, emission))
            if emission.token in job.stop_ids:
                self._end(job, Done("stop"), evict=True)
            elif emission.finished:
                self._end(job, Done("length"))
        for name, guard in list(self._samplers.items()):  # a fault seen by this step's draw
            job = self._running.get(name)
            if guard.error is not None and job is not None:
                self._end(job, Done("error", f"this request's sampler failed: {guard.error}"),
                          evict=True)

    @staticmethod
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

    def _end(self, job: Job, done: Done, *, evict: bool = False) -> None:
        """End a job; a row still in the scheduler is evicted before the next step."""
        self._running.pop(job.name, None)
        self._samplers.pop(job.name, None)
        if evict:
            self.scheduler.remove([job.name])
        job.sink(done)
