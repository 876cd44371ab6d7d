"""Quantized batch KV caches: BatchKV and BatchRing with keys and values in mlx's affine
quantized layout, switched on per batch once a row passes the quantized-KV start.

Storage. ``mx.quantize`` turns keys (B, H, L, D) into three arrays: packed ints (B, H, L,
D * bits / 32) uint32, and scales and biases (B, H, L, D / group_size) in the model
dtype. The caches pack the three into ONE uint32 array per side, the ints first and
then the scales and biases reinterpreted as uint32::

    D 64, bits 4, group 64 (bf16):   [ w0 .. w7 | s b ]   9 uint32 per key and head

so every column move BatchKV and BatchRing make (left padding, growth, filter, extend,
roll, ring wrap, merge) works unchanged on the packed array, and a zero column stays a
key that dequantizes to zero. ``update_and_fetch`` quantizes the new keys, writes them
through the parent's code, and hands the model the three arrays again, as mlx-lm's
``QuantizedKVCache`` does; the model's attention then runs mlx-lm's
``quantized_scaled_dot_product_attention`` (it asks ``hasattr(cache, "bits")``).

The start offset (mlx-lm's ``--quantized-kv-start``). mlx-lm quantizes a row's cache
after the forward that takes its offset to ``start`` or past it (``maybe_quantize_kv_cache``),
so the first forward is always in the model dtype. A batch forward has one attention
call per layer, so a batch holds one format: it switches (quantizing what it holds, as
``KVCache.to_quantized`` does) before the first write at which ANY row has offset >=
max(start, 1). Rows that had not reached the start are then quantized early: such a
row differs from its serial run (the gate measures it by KL, ``docs/quantized-kv.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.models.cache import QuantizedKVCache

from batchlab.engine.caches.kv import BatchKV

QUANT_GROUP_SIZES = (32, 64, 128)  # what mx.quantize takes
QUANT_BITS = (4, 8)


@dataclass(frozen=True, slots=True, kw_only=True)
class KVQuant:
    """One layer's quantization: ``bits`` and ``group_size`` of ``mx.quantize``, and the
    offset from which rows are quantized (``start``, mlx-lm's ``quantized_kv_start``)."""

    bits: int
    group_size: int = 64
    start: int = 0

    def __post_init__(self):
        if self.bits not in QUANT_BITS:  # not gated: input
            raise ValueError(f"kv bits {self.bits} not supported; choose from {QUANT_BITS}")
        if self.group_size not in QUANT_GROUP_SIZES:  # not gated: input
            raise ValueError(f"kv group size {self.group_size} not supported; choose from "
                             f"{QUANT_GROUP_SIZES}")
        if self.start < 0:  # not gated: input
            raise ValueError("the quantized-KV start must be >= 0")



def dtype_name(dtype: mx.Dtype) -> str:
    """``bfloat16`` for mx.bfloat16: a name, since mx.Dtype cannot be deep-copied (the
    scheduler copies prompt caches when it splits a batch)."""
    return str(dtype).rsplit(".", 1)[-1]


def dims_of(keys: mx.array, values: mx.array) -> tuple[int, int, str]:
    return keys.shape[3], values.shape[3], dtype_name(keys.dtype)


def pack(x: mx.array, q: KVQuant) -> mx.array:
    """``x`` (..., D) quantized and packed into one uint32 array (..., words)."""
    w, scales, biases = mx.quantize(x, group_size=q.group_size, bits=q.bits)
    return mx.concatenate([w, mx.concatenate([scales, biases], axis=-1).view(mx.uint32)], axis=-1)


def unpack(p: mx.array, q: KVQuant, dim: int, dtype: mx.Dtype) -> tuple[mx.array, ...]:
    """The (ints, scales, biases) triple ``pack`` stored, for keys of ``dim`` elements."""
    ints = dim * q.bits // 32
    groups = dim // q.group_size
    sb = mx.contiguous(p[..., ints:]).view(dtype)
    return p[..., :ints], sb[..., :groups], sb[..., groups:]


class QuantizedMode:
    """The format switch and the packed write, mixed into BatchKV and BatchRing (the
    subclass below and ``quantized_ring.py``). ``bits`` and ``group_size`` exist only
    while the cache is quantized: mlx-lm's attention picks its quantized kernel by
    ``hasattr(cache, "bits")``."""

    quant: KVQuant
    quantized: bool
    # the engine's own packed cache: on CUDA the attention dispatch sends its calls to the
    # engine's quantized attention. mlx-lm's QuantizedKVCache (the serial oracle's) has
    # ``bits`` too but not this, so the oracle never runs the engine's code.
    attends_packed = True
    served_packed: tuple | None = None  # (ints served, packed K, packed V, dk, dv)
    _dims: tuple[int, int, str] | None  # (key dim, value dim, dtype name) once known

    def _init_quant(self, quant: KVQuant) -> None:
        self.quant = quant
        self.quantized = False
        self._dims = None

    @property
    def bits(self) -> int:
        if not self.quantized:
            raise AttributeError("bits: this cache still holds the model dtype")
        return self.quant.bits

    @property
    def group_size(self) -> int:
        if not self.quantized:  # not gated: protocol
            raise AttributeError("group_size: this cache still holds the model dtype")
        return self.quant.group_size

    def passed_start(self) -> bool:
        """Whether any row's offset has reached max(start, 1) (it has had a forward)."""
        return self.offset_ints.bounds()[1] >= max(self.quant.start, 1)

    def switch_to_quantized(self) -> None:
        """Quantize what the cache holds (padding and unused columns included, as
        ``KVCache.to_quantized`` does); from now on every write is quantized."""
        if self.quantized:
            return
        if self.keys is not None:  # one way: has keys
            self._dims = dims_of(self.keys, self.values)
            self.keys, self.values = self._pack_keys(self.keys), pack(self.values, self.quant)
        self.quantized = True

    def _quantized_write(self, write, keys: mx.array, values: mx.array):
        """``write`` is the parent's ``update_and_fetch``; it sees packed arrays."""
        if not self.quantized and self.passed_start():
            self.switch_to_quantized()
        if not self.quantized:
            return write(keys, values)
        if self._dims is None:  # not gated: misuse
            self._dims = dims_of(keys, values)
        k, v = write(self._pack_keys(keys), pack(values, self.quant))
        # the parent returns keys_and_values() (already served) or, in a ring's
        # prefill, its packed uint32 arrays as they are
        packed = isinstance(k, mx.array) and k.dtype == mx.uint32
        return self.unpacked(k, v) if packed else (k, v)

    def unpacked(self, k: mx.array, v: mx.array):
        dk, dv, dtype = self._dims
        dtype = getattr(mx, dtype)
        served = unpack(k, self.quant, dk, dtype), unpack(v, self.quant, dv, dtype)
        # what was unpacked, as stored: CUDA decode attention reads these words
        # (kernels/quantized_decode.py), found by the ints array it was handed
        self.served_packed = (served[0][0], k, v, dk, dv)
        return served

    def _pack_keys(self, keys: mx.array) -> mx.array:
        """Keys as stored (a subclass may transform them first: ``rotated_kv.py``)."""
        return pack(keys, self.quant)

    def _align_format(self, other) -> None:
        """Before ``extend``: one side quantized makes both quantized (dims shared)."""
        if self.quantized == other.quantized:
            return
        for c in (self, other):
            c.switch_to_quantized()
        dims = self._dims or other._dims
        self._dims = other._dims = dims

    # The cache protocol, over the BatchKV / BatchRing this mixes into (it comes first in
    # their MRO, so super() is the bf16 cache).
    def update_and_fetch(self, keys: mx.array, values: mx.array):
        return self._quantized_write(super().update_and_fetch, keys, values)

    def keys_and_values(self):
        k, v = super().keys_and_values()
        return self.unpacked(k, v) if self.quantized else (k, v)

    def extend(self, other) -> None:
        self._align_format(other)
        super().extend(other)

    def kv_nbytes(self) -> int:  # not gated: protocol
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes


class BatchQuantizedKV(QuantizedMode, BatchKV):
    """Full-attention batch cache, quantized from the start offset on (see module)."""

    def __init__(self, left_padding: Sequence[int], quant: KVQuant):
        super().__init__(left_padding)
        self._init_quant(quant)

    def extract(self, idx: int):
        """Row ``idx`` as mlx-lm's ``QuantizedKVCache`` (or ``KVCache`` before the switch)."""
        row = super().extract(idx)
        if not self.quantized:  # not gated: kv history
            return row
        cache = QuantizedKVCache(group_size=self.quant.group_size, bits=self.quant.bits)
        if self.keys is not None:  # one way: kv history
            cache.keys, cache.values = self.unpacked(row.keys, row.values)
        cache.offset = row.offset
        return cache

    @classmethod
    def merge_quantized(
            cls, caches: Sequence, quant: KVQuant) -> BatchQuantizedKV:
        """Left-pad single-row caches (mlx-lm ``QuantizedKVCache`` rows, or ``KVCache``
        rows, quantized here) to the longest, as ``BatchKV.merge`` does."""
        packed = [_packed_row(c, quant) for c in caches]
        sizes = [c.offset for c in caches]
        cache = cls._merged(sizes, lambda i, s: (packed[i][0][..., :s, :],
                                                 packed[i][1][..., :s, :]),
                            lambda pads: cls(pads, quant))
        if cache is None:  # not gated: empty merge
            return cls([0] * len(caches), quant)
        cache.offset = cache.offset_host + max(sizes)
        cache._idx = max(sizes)
        cache.quantized = True
        first = next(c for c in caches if c.keys is not None)
        cache._dims = _row_dims(first, quant)
        return cache


def _row_dims(c, quant: KVQuant) -> tuple[int, int, str]:
    if isinstance(c.keys, tuple):
        return (c.keys[0].shape[3] * 32 // quant.bits, c.values[0].shape[3] * 32 // quant.bits,
                dtype_name(c.keys[1].dtype))
    return dims_of(c.keys, c.values)


def _packed_row(c, quant: KVQuant) -> tuple[mx.array, mx.array] | None:
    if c.keys is None:  # not gated: kv history
        return None
    if isinstance(c.keys, tuple):
        if (c.bits, c.group_size) != (quant.bits, quant.group_size):  # not gated: input
            raise ValueError(f"a row quantized at {c.bits} bits / group {c.group_size} cannot "
                             f"join a batch at {quant.bits} bits / group {quant.group_size}")
        return tuple(mx.concatenate([t[0], mx.concatenate([t[1], t[2]], axis=-1)
                                     .view(mx.uint32)], axis=-1) for t in (c.keys, c.values))
    return pack(c.keys, quant), pack(c.values, quant)
