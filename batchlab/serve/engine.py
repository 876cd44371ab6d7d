"""ServeEngine: one thread owns a scheduler; HTTP threads hand it jobs and read tokens.

Only the engine thread touches MLX. A request thread calls ``submit`` (which checks the
request and returns a ``Job`` at once) and then reads ``job.events`` until a ``Done``;
``cancel`` evicts a job wherever it is. Each turn of the engine loop:

1. takes new jobs and cancellations from the inbox;
2. admits waiting jobs, oldest first, while the projected KV bytes of everything
   admitted stays within ``kv_budget`` (``budget.RowCost``); the first that does not
   fit waits, and so do all behind it (no overtaking, so no job starves);
3. runs one ``scheduler.step()`` (continuous batching: rows join and leave between
   steps) and hands each emitted token to its job; a stop token ends the job at once.

A job that could never fit (its own projection exceeds the budget) is refused by
``submit`` with the numbers, rather than queued forever.
"""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass, field

from mlx import nn

from batchlab.engine.batch import Request
from batchlab.engine.config import ScheduleConfig
from batchlab.engine.processors import ProcessorParams
from batchlab.engine.sampler import SamplingParams
from batchlab.engine.scheduler import Scheduler
from batchlab.serve.budget import RowCost, measure_row_cost

IDLE_WAIT_S = 0.05  # how long an idle engine sleeps before looking at its inbox again


@dataclass(frozen=True, slots=True)
class Token:
    id: int


@dataclass(frozen=True, slots=True)
class Done:
    reason: str  # "stop" (a stop token), "length" (max_tokens), "cancelled", "error"
    error: str | None = None


@dataclass(slots=True, kw_only=True, eq=False)  # a job is itself, not its fields
class Job:
    name: str
    prompt: tuple[int, ...]
    max_tokens: int
    sampling: SamplingParams
    stop_ids: frozenset[int]
    processors: ProcessorParams | None = None
    events: queue.Queue = field(default_factory=queue.Queue)  # Token ... then one Done
    num_tokens: int = 0

    @property
    def projected_tokens(self) -> int:
        return len(self.prompt) + self.max_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineStats:
    running: int  # jobs admitted into the scheduler
    waiting: int  # jobs held back by the KV budget
    projected_kv_bytes: int
    kv_budget: int | None
    tokens_generated: int
    steps: int


class ServeEngine:
    def __init__(self, model: nn.Module, *, scheduler_class: type[Scheduler] = Scheduler,
                 max_batch: int = 32, kv_budget: int | None = None,
                 vocab_size: int, stop_ids: frozenset[int] = frozenset()):
        if max_batch < 1:
            raise ValueError("--max-batch must be >= 1")
        if kv_budget is not None and kv_budget <= 0:
            raise ValueError("--kv-budget must be a positive number of bytes")
        self.scheduler = scheduler_class(model, ScheduleConfig(
            prefill_batch_size=min(8, max_batch), completion_batch_size=max_batch))
        self.row_cost: RowCost = measure_row_cost(model)
        self.kv_budget = kv_budget
        self.vocab_size = vocab_size
        self.default_stop_ids = stop_ids
        self._inbox: queue.Queue = queue.Queue()
        self._wake = threading.Event()
        self._waiting: list[Job] = []
        self._running: dict[str, Job] = {}
        self._ids = itertools.count()  # next() on a count is atomic: submit runs on many threads
        self._tokens = self._steps = 0
        self._stop = threading.Event()
        self._stats = self._snapshot()
        self._thread = threading.Thread(target=self._loop, name="batchlab-engine", daemon=True)
        self.failure: str | None = None  # set if the engine loop itself crashed

    # -- the request threads' side ------------------------------------------------------

    def start(self) -> ServeEngine:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def submit(self, prompt: list[int], *, max_tokens: int,
               sampling: SamplingParams, stop_ids: frozenset[int] | None = None,
               processors: ProcessorParams | None = None) -> Job:
        """Check a request and queue it; raises ValueError (the client's fault) with
        what to change."""
        if self.failure:
            raise RuntimeError(f"the engine stopped after an error: {self.failure}")
        if not prompt:
            raise ValueError("the prompt is empty: give at least one token")
        bad = [t for t in prompt if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary "
                             f"[0, {self.vocab_size})")
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        biased = [t for t, _ in processors.logit_bias] if processors else []
        if any(not 0 <= t < self.vocab_size for t in biased):
            raise ValueError(f"logit_bias token ids {biased[:5]} must be inside the vocabulary "
                             f"[0, {self.vocab_size})")
        job = Job(name=f"job-{next(self._ids)}", prompt=tuple(prompt), max_tokens=max_tokens,
                  sampling=sampling, processors=processors,
                  stop_ids=self.default_stop_ids if stop_ids is None else stop_ids)
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

    def _snapshot(self) -> EngineStats:
        running = list(self._running.values())
        return EngineStats(running=len(running), waiting=len(self._waiting),
                           projected_kv_bytes=self._projected(running),
                           kv_budget=self.kv_budget, tokens_generated=self._tokens,
                           steps=self._steps)

    # -- the engine thread --------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._read_inbox()
                self._admit()
                self._stats = self._snapshot()
                if not self.scheduler.num_active:
                    self._wake.wait(IDLE_WAIT_S)
                    self._wake.clear()
                    continue
                self._step()
        except Exception as err:  # noqa: BLE001 - a bug in the engine: fail every job, say why
            self.failure = f"{type(err).__name__}: {err}"
            for job in [*self._waiting, *self._running.values()]:
                job.events.put(Done("error", self.failure))
            self._waiting.clear()
            self._running.clear()

    def _read_inbox(self) -> None:
        while True:
            try:
                kind, job = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "submit":
                self._waiting.append(job)
            elif job in self._waiting:
                self._waiting.remove(job)
                job.events.put(Done("cancelled"))
            elif job.name in self._running:
                self._finish(job, "cancelled")

    def _admit(self) -> None:
        admitted = []
        running = list(self._running.values())
        for job in self._waiting:
            if (self.kv_budget is not None
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

    def _projected(self, jobs: list[Job]) -> int:
        return self.row_cost.batch_bytes([j.projected_tokens for j in jobs])

    def _step(self) -> None:
        emissions = self.scheduler.step()
        self._steps += 1
        for emission in emissions:
            job = self._running.get(emission.name)
            if job is None:  # cancelled while its token was in flight
                continue
            job.num_tokens += 1
            self._tokens += 1
            job.events.put(Token(emission.token))
            if emission.token in job.stop_ids:
                self._finish(job, "stop")
            elif emission.finished:
                self._finish(job, "length")

    def _finish(self, job: Job, reason: str) -> None:
        """End a job; a row still in the scheduler is evicted before the next step."""
        del self._running[job.name]
        if reason != "length":
            self.scheduler.remove([job.name])
        job.events.put(Done(reason))

