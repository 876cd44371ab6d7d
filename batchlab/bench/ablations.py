"""Bench-only ablations of the l1 engine: what one change would buy, measured beside l1.

These are NOT engine paths (nothing gates their bits); they exist so that one GPU run
answers "how much of the gap to ``generate_step`` is X". Each wraps the l1 Scheduler
without editing it.

``l1-nomask``: at a decode step (N = 1) a full-attention row with no left padding sees
every key, so its boolean mask is all True. BatchGenerator still passes it, and on CUDA
an array mask rules out the fused decode kernels (in the MLX source read for this:
``supports_sdpa_vector`` wants ``!has_arr_mask`` below head_dim 256, and cuDNN decode
refuses array masks), so attention runs unfused: several kernels per layer instead of
one. This ablation hands the model ``None`` instead, as ``generate_step``'s KVCache does.
Its bits follow generate_step's attention kernel, not BatchGenerator's: a real path built
on it must be gated against generate_step (B=1) and not be called l1.
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.kv import BatchKV
from batchlab.engine.scheduler import Scheduler


class _UnmaskedDecode:
    """A BatchKV seen through a proxy whose N=1 mask is None when no row is padded."""

    __slots__ = ("_cache",)

    def __init__(self, cache: BatchKV):
        object.__setattr__(self, "_cache", cache)

    def __getattr__(self, name):
        return getattr(self._cache, name)

    def __setattr__(self, name, value) -> None:
        setattr(self._cache, name, value)

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None):
        if N == 1 and window_size is None and not self._cache.left_padding_host.any():
            return None  # query at _idx sees keys 0.._idx: every column is True
        return self._cache.make_mask(N, return_array=return_array, window_size=window_size)


class UnmaskedScheduler(Scheduler):
    """The l1 Scheduler with full-attention decode masks dropped where they are all True."""

    def _forward_logprobs(self, inputs: mx.array, caches: list) -> mx.array:
        wrapped = [_UnmaskedDecode(c) if type(c) is BatchKV else c for c in caches]
        return super()._forward_logprobs(inputs, wrapped)
