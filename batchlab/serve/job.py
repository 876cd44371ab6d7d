"""What a request is to the engine: a ``Job`` (checked when it is made), the events it
gets back (``Token``, then one ``Done``), and the guard around its row's sampler."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx

from batchlab.engine.core.processors import ProcessorParams
from batchlab.engine.core.sampler import RowSampler, SamplingParams

log = logging.getLogger("batchlab.serve.engine_thread")


@dataclass(frozen=True, slots=True)
class Token:
    id: int
    logprob: float | None = None  # set when the job asked for logprobs
    top: tuple[tuple[int, float], ...] = ()  # (id, logprob), most likely first


@dataclass(frozen=True, slots=True)
class Done:
    reason: str  # "stop" (a stop token), "length", "cancelled", "error", "shutdown"
    error: str | None = None


class JobError(ValueError):
    """A job the client got wrong; ``param`` names the field (OpenAI's ``param``)."""

    def __init__(self, message: str, *, param: str):
        super().__init__(message)
        self.param = param


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
    finished: bool = False  # its Done has gone out (the engine sends one, exactly)
    # prompt tokens its row joined with from the prompt cache (set at admission, by the
    # engine thread, before the job's first event)
    cached_tokens: int = 0
    # the most rows of a decode step that emitted one of its tokens, and how many of
    # those steps had another row in them: who shared a batch with it, as the engine saw
    # it (the response reports both; ``batchlab http check``'s needle reads them)
    peak_rows: int = 0
    shared_steps: int = 0
    submitted_at: float = field(default_factory=time.monotonic)

    @property
    def projected_tokens(self) -> int:
        return len(self.prompt) + self.max_tokens


def make_job(name: str, job_args: dict, sink: Callable[[Token | Done], None], *,
             vocab_size: int, default_stop_ids: frozenset[int]) -> Job:
    """A checked job. Raises JobError (the client's fault) naming the field to change."""
    prompt, max_tokens = job_args["prompt"], job_args["max_tokens"]
    processors, stop_ids = job_args.get("processors"), job_args.get("stop_ids")
    if not prompt:
        raise JobError("the prompt is empty: give at least one token", param="prompt")
    bias_ids = [t for t, _ in processors.logit_bias] if processors else []
    for param, ids in (("prompt", prompt), ("logit_bias", bias_ids),
                       ("stop_token_ids", stop_ids or ())):
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:  # the offending ids themselves, not the first few of the list
            raise JobError(f"{param}: token ids {bad[:8]} are outside the vocabulary "
                           f"[0, {vocab_size})", param=param)
    if max_tokens < 1:
        raise JobError("max_tokens must be >= 1", param="max_tokens")
    return Job(name=name, prompt=tuple(prompt), max_tokens=max_tokens, processors=processors,
               sampling=job_args["sampling"], logprobs=job_args.get("logprobs"),
               stop_ids=default_stop_ids if stop_ids is None else stop_ids, sink=sink)


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
