"""A request's checked fields as the engine's job arguments: each choice's sampling, the
stop ids, the logit processors and how many top logprobs to report."""

from __future__ import annotations

import secrets

from batchlab.engine.core.sampler import SamplingParams
from batchlab.serve.errors import APIError
from batchlab.serve.schema import SEED_LIMIT, ChatRequest, Common, CompletionRequest


def stop_ids_of(req: Common, engine) -> frozenset[int]:
    """The request's ``stop_token_ids``, else the model's own end tokens."""
    if req.stop_token_ids is None:
        return engine.default_stop_ids
    return frozenset(in_vocab(req.stop_token_ids, engine.vocab_size, "stop_token_ids"))


def processors_of(req: Common, vocab_size: int):
    try:
        processors = req.processors()
    except ValueError as err:
        raise APIError(400, str(err), param="logit_bias") from None
    if processors is not None:
        in_vocab([t for t, _ in processors.logit_bias], vocab_size, "logit_bias")
    return processors


def sampling_of(req: Common, j: int, defaults, vocab_size: int) -> SamplingParams:
    """Choice j's sampling: the request's fields, else the server's defaults (``--temp``,
    ...); a request without a seed gets a fresh random one. ``top_p`` 0 keeps the most
    likely token alone (OpenAI takes it): served as greedy. ``top_k`` -1 (vLLM's) and 0
    are off, and so is a ``top_k`` of the vocabulary or more (it keeps every token)."""
    def pick(name):
        value = getattr(req, name)
        return getattr(defaults, name) if value is None else value

    seed = secrets.randbits(64) if req.seed is None else (req.seed + j) % SEED_LIMIT
    temperature, top_p, top_k = pick("temperature"), pick("top_p"), pick("top_k")
    if top_p == 0:
        temperature, top_p = 0.0, 1.0
    if top_k < 0 or top_k >= vocab_size:
        top_k = 0
    try:
        return SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k,
                              min_p=pick("min_p"), seed=seed)
    except ValueError as err:
        raise APIError(400, str(err), param="temperature") from None


def in_vocab(ids: list[int], vocab_size: int, param: str) -> list[int]:
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise APIError(400, f"{param}: token ids {bad[:8]} are outside the vocabulary "
                       f"[0, {vocab_size})", param=param)
    return ids


def top_logprobs_of(req: Common) -> int | None:
    if isinstance(req, ChatRequest):
        if req.top_logprobs is not None and not req.logprobs:
            raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        return (req.top_logprobs or 0) if req.logprobs else None
    assert isinstance(req, CompletionRequest)
    return req.logprobs
