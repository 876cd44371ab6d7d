"""``kv4h``: 4-bit KV with Hadamard-rotated keys, a lab path with no mlx-lm oracle.

Plain 4-bit keys lose most where a few channels carry most of a key's magnitude (one
group's scale is set by its largest element). An orthonormal Hadamard rotation ``H``
spreads every channel over all of them before quantizing, and is undone after: the
cache stores ``quantize(k H)`` and hands the model ``dequantize(.) H^T`` (``H`` is
symmetric), so ``q . k`` is kept up to the rounding of the rotated keys. Values are
stored 4-bit as they are.

The model's attention then runs in the model dtype on the dequantized keys and values
(no ``bits`` attribute: mlx-lm's ordinary SDPA), so this path saves memory, not
attention bandwidth. Gated by KL only (``batchlab lab kl``): mlx-lm has no rotated cache.
"""

from __future__ import annotations

import functools

import mlx.core as mx

from batchlab.engine.paths.quantized import kv as quantized_kv
from batchlab.engine.paths.quantized.kv import BatchQuantizedKV


@functools.lru_cache(maxsize=8)
def hadamard(dim: int, dtype_name: str) -> mx.array:
    """The (dim, dim) Sylvester Hadamard matrix over sqrt(dim): orthonormal, symmetric."""
    if dim < 1 or dim & (dim - 1):  # not gated: refusal (refuses_quantized says it first)
        raise ValueError(f"a Hadamard rotation needs a power-of-two head dim, not {dim}")
    h = mx.array([[1.0]])
    while h.shape[0] < dim:
        h = mx.concatenate([mx.concatenate([h, h], axis=1), mx.concatenate([h, -h], axis=1)])
    return (h / dim**0.5).astype(getattr(mx, dtype_name))


class BatchRotatedKV(BatchQuantizedKV):
    """BatchQuantizedKV whose keys are stored rotated and served dequantized."""

    @property
    def bits(self) -> int:  # never: the model must run its ordinary attention
        raise AttributeError("bits: a rotated cache serves dequantized keys")

    @property
    def group_size(self) -> int:
        raise AttributeError("group_size: a rotated cache serves dequantized keys")

    def _pack_keys(self, keys: mx.array) -> mx.array:
        h = hadamard(keys.shape[-1], quantized_kv.dtype_name(keys.dtype))
        return quantized_kv.pack(keys @ h, self.quant)

    def unpacked(self, k: mx.array, v: mx.array):
        dk, dv, dtype = self._dims
        q = self.quant
        keys = mx.dequantize(*quantized_kv.unpack(k, q, dk, getattr(mx, dtype)),
                             group_size=q.group_size, bits=q.bits)
        values = mx.dequantize(*quantized_kv.unpack(v, q, dv, getattr(mx, dtype)),
                               group_size=q.group_size, bits=q.bits)
        return keys @ hadamard(dk, dtype), values
