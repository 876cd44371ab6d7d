"""Sampling: greedy exactly as the oracle computes it, mlx-lm's filter chain, two key rules.

Greedy is ``argmax`` over the log-probabilities (not over the raw logits: in bf16 the
subtraction rounds distinct logits onto one logprob, so the two part on flat
distributions), first index on ties.

At temperature > 0 the logprobs go through mlx-lm's ``make_sampler`` chain, op for op,
because the gate compares sampled tokens bit for bit: top-p, then min-p, then XTC, then
top-k, each masking to -inf on the unscaled logprobs, then
``categorical(logprobs * (1 / temp))``. XTC tosses ONE coin per call (``uniform()``, a
scalar) from MLX's global key, before the draw: a batch sampled in one call shares it.
Where the draw's random bits come from is the one choice:

- ``BatchSampler``: the batch's shared sampler (mlx-lm's ``BatchGenerator(sampler=...)``).
  One categorical call over the (B, V) batch per forward, from MLX's global key, so a
  row's draw depends on B and on its position: the oracle's rule, reproduced for the gate.
- ``RowSampler``: a row that owns its PRNG key and splits it once per token, so its random
  bits depend only on its seed and its token count, never on B or its neighbours (serving,
  and the invariant path). mlx-lm has no such rule: the invariant path's solo gate (each
  row against its run alone) is what checks it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import mlx.core as mx


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0  # 1 = off
    top_k: int = 0  # 0 = off
    min_p: float = 0.0  # 0 = off
    seed: int = 0  # RowSampler: the row's key; BatchSampler runs: MLX's global seed
    xtc_probability: float = 0.0  # 0 = off
    xtc_threshold: float = 0.1  # mlx-lm's default

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def __post_init__(self):
        if (not math.isfinite(self.temperature) or self.temperature < 0
                or not 0 < self.top_p <= 1 or self.top_k < 0):
            raise ValueError(
                f"bad sampling params {self}: need a finite temperature >= 0, "
                "0 < top_p <= 1, top_k >= 0"
            )
        if not 0 <= self.min_p < 1:
            raise ValueError(f"bad sampling params {self}: need 0 <= min_p < 1")
        if not 0 <= self.seed < 2**64:
            raise ValueError(f"bad sampling params {self}: need 0 <= seed < 2**64")
        xtc_ok = 0 <= self.xtc_probability <= 1 and 0 <= self.xtc_threshold <= 0.5
        if not xtc_ok:
            raise ValueError(f"bad sampling params {self}: need 0 <= xtc_probability <= 1 "
                             "and 0 <= xtc_threshold <= 0.5 (mlx-lm's bounds)")

    def as_dict(self) -> dict:
        """The fields, without the XTC pair while XTC is off: the definitions (and goldens)
        of cells that never used it stay what they were before it existed."""
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        if not self.xtc_probability:
            del out["xtc_probability"], out["xtc_threshold"]
        return out


GREEDY = SamplingParams()


def _top_p(logprobs: mx.array, top_p: float) -> mx.array:
    """Drop the tokens whose mass above them (exclusive) is at least ``top_p`` of the whole:
    the most likely token always stays, and so does every token tied with the threshold."""
    ascending = mx.sort(logprobs, axis=-1)
    probs = mx.exp(ascending.astype(mx.float32))
    above = mx.cumsum(probs, axis=-1, reverse=True, inclusive=False)
    total = above[..., :1] + probs[..., :1]
    num_dropped = (above >= top_p * total).sum(axis=-1, keepdims=True)
    threshold = mx.take_along_axis(ascending, num_dropped, axis=-1)
    return mx.where(logprobs < threshold, -float("inf"), logprobs)


# Compiled as mlx-lm compiles its own min-p: a fused kernel may round the threshold
# differently from the eager ops, and the gate compares the kept sets bit for bit.
@partial(mx.compile, inputs=mx.random.state, outputs=mx.random.state)
def _min_p(logprobs: mx.array, min_p: float) -> mx.array:
    """Keep tokens with probability >= min_p x the top one's (logprob >= top + log min_p)."""
    floor = mx.max(logprobs, axis=-1, keepdims=True) + math.log(min_p)
    return mx.where(logprobs < floor, -float("inf"), logprobs)


# Compiled with the random state as mlx-lm's apply_xtc is: its coin must take the same turn
# of the global key, and the fused softmax / threshold must round as the oracle's does.
@partial(mx.compile, inputs=mx.random.state, outputs=mx.random.state)
def _xtc(logits: mx.array, xtc_probability: float, xtc_threshold: float) -> mx.array:
    """With probability ``xtc_probability`` (one coin for the whole call), drop every token
    more likely than the least likely one above ``xtc_threshold`` (no special tokens)."""
    probs = mx.softmax(logits, -1)
    mask = probs > mx.where(probs > xtc_threshold, probs, mx.inf).min(axis=-1, keepdims=True)
    return mx.where(mx.random.uniform(0, 1) > xtc_probability, logits,
                    mx.where(mask, -mx.inf, logits))


def _top_k(logprobs: mx.array, top_k: int) -> mx.array:
    """Keep the ``top_k`` largest (argpartition's choice among ties at the k-th value)."""
    dropped = mx.argpartition(-logprobs, kth=top_k - 1, axis=-1)[..., top_k:]
    return mx.put_along_axis(logprobs, dropped, mx.array(-float("inf"), logprobs.dtype),
                             axis=-1)


def filtered_logits(logprobs: mx.array, p: SamplingParams) -> mx.array:
    """What the categorical draw sees: the filters on the logprobs, then the temperature."""
    x = logprobs
    if 0 < p.top_p < 1:
        x = _top_p(x, p.top_p)
    if p.min_p != 0.0:
        x = _min_p(x, p.min_p)
    if p.xtc_probability > 0.0:
        x = _xtc(x, p.xtc_probability, p.xtc_threshold)
    if 0 < p.top_k < x.shape[-1]:
        x = _top_k(x, p.top_k)
    return x * (1.0 / p.temperature)


class BatchSampler:
    """The batch's shared sampler: one draw over all its rows, from MLX's global key."""

    def __init__(self, params: SamplingParams = GREEDY):
        self.params = params

    def __call__(self, logprobs: mx.array) -> mx.array:
        """``logprobs``: shape (B, V). Returns shape (B,) uint32."""
        if self.params.greedy:
            return mx.argmax(logprobs, axis=-1)
        return mx.random.categorical(filtered_logits(logprobs, self.params))


class RowSampler:
    """One row's own sampler. ``key`` advances by one split per sampled token."""

    def __init__(self, params: SamplingParams):
        self.params = params
        self.key = None if params.greedy else mx.random.key(params.seed)

    def __call__(self, logprobs: mx.array) -> mx.array:
        """``logprobs``: shape (1, V). Returns shape (1,) uint32. (XTC's coin, if on, comes
        from MLX's global key: mlx-lm's op takes no key.)"""
        if self.params.greedy:
            return mx.argmax(logprobs, axis=-1)
        self.key, draw = mx.random.split(self.key)
        return mx.random.categorical(filtered_logits(logprobs, self.params), key=draw)


def sample_rows(logprobs: mx.array, samplers: list) -> mx.array:
    """One token per row of (B, V) logprobs, as BatchGenerator samples: one call when every
    row has the same sampler (all-greedy batches take one argmax), else one call per row."""
    if all(s.params.greedy for s in samplers):
        return mx.argmax(logprobs, axis=-1)
    if all(s is samplers[0] for s in samplers):
        return samplers[0](logprobs)
    return mx.concatenate([s(logprobs[i : i + 1]) for i, s in enumerate(samplers)], axis=0)
