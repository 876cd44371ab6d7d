"""The ``fast`` path: l1's schedule and layouts, minus the decode masks that hide nothing.

At a decode step (N = 1) a full-attention row without left padding sees every key, so its
mask is all True. mlx-lm's BatchGenerator still builds and passes it, where its
single-stream ``generate_step`` (a plain KVCache) passes ``None``; on CUDA an array mask
rules out MLX's fused decode attention (several kernels per layer instead of one). This
path hands the model ``None`` exactly when the mask would be all True, on every backend
(l1 does so only on the CPU backend, where it cannot change a bit: ``BatchKV``).

Masked and unmasked attention may round differently, so this is not l1: the gate is
bit-exact against the oracle where it stays exact (the CPU backend) and KL statistics
against it where it does not (``batchlab.engine.paths.registry``). On a GPU with real head dims
it is not bit-exact (``docs/results.md``).
"""

from __future__ import annotations

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.core.factory import BatchCaches
from batchlab.engine.core.scheduler import Scheduler


class UnmaskedDecodeKV(BatchKV):
    """A BatchKV whose decode mask is ``None`` when no row is padded, on every backend."""

    @staticmethod
    def drops_all_true_decode_mask() -> bool:
        return True


class FastScheduler(Scheduler):
    caches = BatchCaches(kv_class=UnmaskedDecodeKV)
