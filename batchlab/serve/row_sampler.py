"""The server's per-row sampler: each row owns its PRNG key.

The matrix samples as mlx-lm's BatchGenerator does (``engine.sampler.BatchSampler``: MLX's
global key, one draw per step over the batch), so a row's draw there depends on B and on
its position. A server wants a row's tokens to depend on its request alone (its seed and
its token count), whatever else is running: so each row splits its own key once per
token. mlx-lm has no such rule to gate it against; tests/unit/test_sampler.py pins it.
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.sampler import SamplingParams, filtered_logits


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
