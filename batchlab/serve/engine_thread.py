"""ServeEngine: one thread owns a scheduler; request handlers hand it jobs and get events.

Only the engine thread touches MLX: it runs an ``EngineWorker`` (``worker.py``: the
scheduler, the jobs in flight, the prompt cache). A handler calls ``submit`` (which
checks the job and queues it at once); the engine calls ``job.sink(event)`` from its own
thread for every ``Token`` and one final ``Done`` (the HTTP layer's sink moves them onto
its event loop). ``cancel`` evicts a job wherever it is. Handlers and the thread share
only the inbox and the ``EngineStats`` snapshot published after every turn.

Containment: every row samples through its own ``GuardedSampler``; a sampler (or, later,
a logits processor) that raises ends that row alone with the error, and the step goes on
with a placeholder token the row never sees. A step that raises anyway (a bug the rows
cannot be blamed for) is logged with its traceback, fails the rows in it, and the engine
goes on with a fresh scheduler (``worker.py``: what each kind of fault ends). Whatever
happens, every job gets one ``Done``: a recovery that raises too, or a thread that stops,
ends every job it holds with an error, and a job submitted after that is refused.
``health()`` reports "degraded" for ``DEGRADED_FOR_S`` after any fault.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable

from mlx import nn

from batchlab.defaults import DEFAULT_PROMPT_CACHE_SIZE
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.layers import key_width_reader, scalar_offset_reader
from batchlab.engine.core.sampler import RowSampler
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.invariant.path import InvariantScheduler
from batchlab.serve.budget import RowCost, measure_row_cost
from batchlab.serve.job import Done, EngineUnavailable, Job, Token, make_job
from batchlab.serve.prompt_cache import PromptCache
from batchlab.serve.stats import EngineStats
from batchlab.serve.worker import EngineWorker

IDLE_WAIT_S = 0.05  # how long an idle engine sleeps before looking at its inbox again
# /health says "degraded" (503) this long after a fault: a probe notices a server whose
# every request crashes, and one fault long ago does not keep it out of rotation
DEGRADED_FOR_S = 60.0
log = logging.getLogger("batchlab.serve.engine_thread")

__all__ = ["Done", "EngineStats", "EngineUnavailable", "Job", "ServeEngine", "Token"]


class ServeEngine:
    def __init__(self, model: nn.Module, *, scheduler_class: type[Scheduler] = Scheduler,
                 max_batch: int = 32, prompt_concurrency: int = 8,
                 prefill_step_size: int = 512, kv_budget: int | None = None,
                 vocab_size: int, stop_ids: frozenset[int] = frozenset(),
                 sampler_factory: Callable[[Job], RowSampler] | None = None,
                 prompt_cache_size: int = DEFAULT_PROMPT_CACHE_SIZE,
                 prompt_cache_bytes: int | None = None):
        if max_batch < 1:
            raise ValueError("--decode-concurrency must be >= 1")
        if prompt_concurrency < 1 or prefill_step_size < 1:
            raise ValueError("--prompt-concurrency and --prefill-step-size must be >= 1")
        if kv_budget is not None and kv_budget <= 0:
            raise ValueError("--kv-budget must be a positive number of bytes")
        if issubclass(scheduler_class, InvariantScheduler):
            # the invariant path refuses a row with history, and a cache hit is one: the
            # step raised and took every running row down (`batchlab http check` found it)
            prompt_cache_size = 0
        prompt_cache = PromptCache(prompt_cache_size, prompt_cache_bytes)
        reader = scalar_offset_reader(model) or key_width_reader(model)
        if reader is not None and max_batch > 1:
            # per-row offsets crash a scalar-offset reader (every request of a batch failed
            # with a 500: zoo3's llama-dynamic); a key-width reader (afm7) answers a padded
            # row wrongly, as mlx-lm's batch mode does. One row at a time, each is right.
            log.warning("%s reads the offset or its keys' width, which batching changes: "
                        "decoding one request at a time (decode concurrency 1, not %d)",
                        reader, max_batch)
            max_batch = 1
        self.max_batch = max_batch
        self.row_cost: RowCost = measure_row_cost(model, scheduler_class)
        self.kv_budget = kv_budget
        self.vocab_size = vocab_size
        self.default_stop_ids = stop_ids
        # the scheduler decodes at most max(completion, prefill) rows: keep prefill <= max
        config = ScheduleConfig(prefill_batch_size=min(prompt_concurrency, max_batch),
                                completion_batch_size=max_batch,
                                prefill_step_size=prefill_step_size)
        self.worker = EngineWorker(
            model, scheduler_class=scheduler_class, config=config, max_batch=max_batch,
            row_cost=self.row_cost, kv_budget=kv_budget, prompt_cache=prompt_cache,
            sampler_factory=sampler_factory or (lambda job: RowSampler(job.sampling)),
            # an invariant answer must not depend on its neighbours: nor its chunks
            fixed_chunks=issubclass(scheduler_class, InvariantScheduler))
        self.degraded_for_s = DEGRADED_FOR_S
        self._inbox: queue.Queue = queue.Queue()
        self._wake = threading.Event()
        self._ids = itertools.count()  # next() on a count is atomic: submit runs on many threads
        self.last_crash: str | None = None
        self._stop = threading.Event()
        self._closing = False  # set by begin_shutdown: no new jobs
        self._stats = self.worker.snapshot()
        self._thread = threading.Thread(target=self._loop, name="batchlab-engine", daemon=True)

    @property
    def scheduler(self) -> Scheduler:
        """The engine thread's scheduler (for tests that inject faults into it)."""
        return self.worker.scheduler

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
        self._send("shutdown", time.monotonic() + grace_s)

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
        if not self._thread.is_alive() and self._thread.ident is not None:
            raise EngineUnavailable("the engine has stopped (see the server's log); "
                                    "restart the server")
        job = make_job(f"job-{next(self._ids)}", job_args, sink, vocab_size=self.vocab_size,
                       default_stop_ids=self.default_stop_ids)
        if self.kv_budget is not None:
            need = self.row_cost.batch_bytes([job.projected_tokens])
            if need > self.kv_budget:
                raise ValueError(
                    f"this request alone needs {need} bytes of KV cache ({len(job.prompt)} "
                    f"prompt + {job.max_tokens} max_tokens), over the server's --kv-budget "
                    f"of {self.kv_budget}: lower max_tokens or shorten the prompt")
        self._send("submit", job)
        return job

    def cancel(self, job: Job, *, keep_cache: bool = False) -> None:
        """End a job wherever it is. ``keep_cache``: its row's caches are worth keeping in
        the prompt cache (a stop string ended it, not the client)."""
        self._send("cancel-keep" if keep_cache else "cancel", job)

    def stats(self) -> EngineStats:
        """The state after the engine's last turn (a snapshot: safe from any thread)."""
        return self._stats

    def health(self) -> dict:
        """``status``: "ok"; "degraded" within ``degraded_for_s`` of a fault (a step that
        raised, or a fault contained to one row); "shutting_down"; "failed" (the engine
        thread has stopped). Only "ok" is healthy."""
        fault = self.worker.last_fault
        age = None if fault is None else round(time.monotonic() - fault[0], 3)
        if not self._thread.is_alive():
            status = "failed"
        elif self._closing:
            status = "shutting_down"
        elif age is not None and age < self.degraded_for_s:
            status = "degraded"
        else:
            status = "ok"
        s = self._stats
        return {"status": status, "engine_crashes": s.crashes, "row_faults": s.row_faults,
                "last_crash": self.last_crash, "last_fault": fault and fault[1],
                "last_fault_age_s": age}

    def _send(self, kind: str, item) -> None:
        self._inbox.put((kind, item))
        self._wake.set()

    # -- the engine thread --------------------------------------------------------------

    def _loop(self) -> None:
        worker = self.worker
        try:
            while not self._stop.is_set():
                if not self._turn():
                    self._wake.wait(IDLE_WAIT_S)
                    self._wake.clear()
        except Exception:  # noqa: BLE001 - a recovery raised: the thread stops, failing all
            log.critical("the engine thread stops; every request ends with an error:\n%s",
                         traceback.format_exc())
        finally:
            self._read_inbox()  # jobs submitted meanwhile are held too
            worker.fail_all("the engine stopped before this request finished")
            self._stats = worker.snapshot()
            worker.release()

    def _turn(self) -> bool:
        worker = self.worker
        try:
            self._read_inbox()
            worker.admit(time.monotonic())
            self._stats = worker.snapshot()  # what is queued and prefilling, before the step
            busy = worker.step()
        except Exception:  # noqa: BLE001 - a step no row is blamed for: log, fail, go on
            self.last_crash = traceback.format_exc()
            log.error("engine step failed; the rows in it end with the error:\n%s",
                      self.last_crash)
            worker.recover(self.last_crash.strip().splitlines()[-1])
            busy = True
        self._stats = worker.snapshot()
        return busy

    def _read_inbox(self) -> None:
        while True:
            try:
                kind, item = self._inbox.get_nowait()
            except queue.Empty:
                return
            self.worker.take(kind, item)
