"""Per-row sampling: greedy exactly as the oracle computes it, and seeded samplers.

Greedy is ``argmax`` over the log-probabilities (not over the raw logits: in bf16 the
subtraction rounds distinct logits onto one logprob, so the two part on flat
distributions), first index on ties.

A seeded row owns its PRNG key and splits it once per token, so the random bits a row
draws depend only on its own seed and how many tokens it has drawn: not on B, not on
its position in the batch. Where the backend's logits are B-invariant (CPU, non-sliding
models) a seeded row therefore samples the same tokens at any B.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise ValueError(
                f"bad sampling params {self}: need temperature >= 0, 0 < top_p <= 1, top_k >= 0"
            )
        if not 0 <= self.min_p < 1:
            raise ValueError(f"bad sampling params {self}: need 0 <= min_p < 1")


GREEDY = SamplingParams()


class RowSampler:
    """One row's sampler. ``key`` advances by one split per sampled token."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.key = None if params.greedy else mx.random.key(params.seed)

    def __call__(self, logprobs: mx.array) -> mx.array:
        """``logprobs``: shape (1, V). Returns shape (1,) uint32."""
        if self.params.greedy:
            return mx.argmax(logprobs, axis=-1)
        self.key, draw = mx.random.split(self.key)
        return mx.random.categorical(filtered_logits(logprobs, self.params), key=draw)


def filtered_logits(logprobs: mx.array, p: SamplingParams) -> mx.array:
    """Temperature, then top-k, top-p and min-p as masks to -inf on (1, V) logprobs."""
    logits = logprobs / p.temperature
    neg_inf = mx.array(-float("inf"), logits.dtype)
    if p.top_k > 0 and p.top_k < logits.shape[-1]:
        kth = mx.sort(logits, axis=-1)[..., -p.top_k][..., None]
        logits = mx.where(logits < kth, neg_inf, logits)
    if p.min_p > 0.0:
        # keep tokens with prob >= min_p * max prob, i.e. logit >= max + log(min_p)
        floor = mx.max(logits, axis=-1, keepdims=True) + mx.log(mx.array(p.min_p))
        logits = mx.where(logits < floor, neg_inf, logits)
    if p.top_p < 1.0:
        probs = mx.softmax(logits, axis=-1)
        order = mx.argsort(-probs, axis=-1)
        sorted_probs = mx.take_along_axis(probs, order, axis=-1)
        # a token stays if the mass strictly before it is below top_p (the top one always)
        before = mx.cumsum(sorted_probs, axis=-1) - sorted_probs
        keep_sorted = before < p.top_p
        keep = mx.put_along_axis(mx.zeros_like(keep_sorted), order, keep_sorted, axis=-1)
        logits = mx.where(keep, logits, neg_inf)
    return logits


def sample_rows(logprobs: mx.array, samplers: list[RowSampler]) -> mx.array:
    """One token per row of (B, V) logprobs. All-greedy batches take one argmax."""
    if all(s.params.greedy for s in samplers):
        return mx.argmax(logprobs, axis=-1)
    return mx.concatenate([s(logprobs[i : i + 1]) for i, s in enumerate(samplers)], axis=0)
