"""The ``fast`` path: l1's schedule and layouts, minus the decode masks that hide nothing.

At a decode step (N = 1) a full-attention row without left padding sees every key, so its
mask is all True. mlx-lm's BatchGenerator still builds and passes it, where its
single-stream ``generate_step`` (a plain KVCache) passes ``None``; on CUDA an array mask
rules out MLX's fused decode attention (several kernels per layer instead of one). This
path hands the model ``None`` exactly when the mask would be all True.

Masked and unmasked attention may round differently, so this is not l1: the gate is
bit-exact against the oracle where it stays exact (the CPU backend) and KL statistics
against it where it does not (``batchlab.engine.paths``).
"""

from __future__ import annotations

from batchlab.engine.kv import BatchKV
from batchlab.engine.scheduler import Scheduler


class UnmaskedDecodeKV(BatchKV):
    """A BatchKV whose decode mask is ``None`` when no row is padded."""

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None):
        unpadded = not self.left_padding_host.any()  # the query at _idx sees columns 0.._idx
        if N == 1 and window_size is None and not return_array and unpadded:
            return None
        return super().make_mask(N, return_array=return_array, window_size=window_size)


class FastScheduler(Scheduler):
    kv_class = UnmaskedDecodeKV
