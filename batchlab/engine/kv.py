"""BatchKV: the full-attention KV cache of a batch, rows left-padded to a shared length.

Three prompts ``[1, 3, 5]``, ``[7]`` and ``[2, 6, 8, 9]`` sit in the cache as::

    col:   0  1  2  3        left_padding = [1, 3, 0]
    row 0: .  1  3  5        offset       = [3, 1, 4]   (RoPE position of the next token)
    row 1: .  .  .  7        _idx         = 4           (shared write index)
    row 2: 2  6  8  9

Every row writes at the same column ``_idx``; ``offset[b] = _idx - left_padding[b]``.
The mask hides each row's first ``left_padding[b]`` columns.

The layout reproduces mlx-lm 0.32's ``BatchKVCache`` exactly (columns, padding, growth
in steps of 256, ``filter`` trimming shared padding, ``extend`` padding both sides), since
on the GPU the bits of attention depend on the key length and where each key sits.

Per-row ints (``offset``, ``left_padding``) live on the host (see ``RowInts``): mlx-lm
keeps them as lazy device arrays and syncs (``.tolist()``) to filter or extract.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

from batchlab.engine.mask import DecodeMasks, causal_mask
from batchlab.engine.single import kv_row

STEP = 256  # keys/values grow in steps of 256 columns, as mlx-lm's caches do


def host_ints(value) -> np.ndarray:
    """A read-only int64 numpy copy of a list, numpy array or mx array of row ints.

    A 1-D int64 array that owns its data (the result of arithmetic such as
    ``cache.offset_host + n``) is taken as is, not copied. The array is made read-only,
    so a caller that kept it and tries to write it gets an error, never a silent change
    (arrays are shared between layers: ``RowInts``)."""
    fresh = type(value) is np.ndarray and value.dtype == np.int64 and value.ndim == 1
    if fresh and (value.flags.owndata or not value.flags.writeable):
        value.flags.writeable = False
        return value
    out = np.array(value.tolist() if isinstance(value, mx.array) else value, dtype=np.int64)
    out = out.reshape(-1)
    out.flags.writeable = False  # write through the descriptor, never in place
    return out


class RowInts:
    """A per-row int vector kept on the host, read as an int32 ``mx.array``.

    ``cache.offset`` gives the device array (built once per change, so each layer's RoPE
    offset costs one small upload per step); ``cache.offset_host`` the numpy copy that
    bookkeeping reads. Assign ``cache.offset = ...`` (list, numpy or mx) to change it;
    ``offset_host`` itself is read-only.
    ``optional=True`` allows ``None`` (ArraysCache's ``left_padding``/``lengths``).

    Host ints build no lazy graph, so mlx-lm's ``mx.depends(keys, (left_padding,
    offset))`` ties (which force those graphs to be evaluated with the keys) are not needed.

    The decode hot path (every layer, every step) stays out of numpy. ``shift`` (the
    ``offset += n`` of every layer) only counts on the host, and the device array is
    made once per step (an upload, or on the CPU backend a lazy add) and shared by every
    layer, found by the identity of the host array; ``bounds`` (min and max: "is any row
    padded?") is memoized the same way. A numpy call is ~1 us alone, but between the
    model's op building it cost far more: on the CPU backend a 2-layer llama decode step
    built in ~205 us with a numpy add and an upload per layer, and in ~175 us without
    (BatchGenerator: ~186 us).
    """

    def __init__(self, optional: bool = False):
        self.optional = optional
        # The last upload, shared: every layer of a step holds the same ints, so a
        # 32-layer model uploads its RoPE offsets once per step, not 32 times. The
        # device array is never written in place, so sharing it is safe.
        self._last: tuple[bytes, mx.array] | None = None
        # __get__'s memo: (base host array, pending shift, device array of their sum)
        self._shifted: tuple[np.ndarray, int, mx.array] | None = None
        self._bounds: tuple[np.ndarray, int, int] | None = None  # bounds' memo

    def __set_name__(self, owner, name: str):
        self.name, self.host, self.dev = name, f"{name}_host", f"_{name}_dev"
        self.base, self.pending = f"_{name}_base", f"_{name}_pending"
        setattr(owner, self.host, _HostInts(self))

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        d = obj.__dict__
        if d.get(self.dev) is None:
            base, pending = d.get(self.base), d.get(self.pending, 0)
            if base is None:
                return None
            memo = self._shifted
            if memo is not None and memo[0] is not base and memo[1] == pending \
                    and np.array_equal(memo[0], base):
                base = d[self.base] = memo[0]  # equal ints in another array: share it
            if memo is None or memo[0] is not base or memo[1] != pending:
                if memo is not None and memo[0] is base and _adds_offsets_on_device():
                    dev = memo[2] + (pending - memo[1])  # last step's, one lazy add
                else:
                    dev = self._upload(host_ints(base + pending) if pending else base)
                memo = self._shifted = (base, pending, dev)
            d[self.dev] = memo[2]
        return d[self.dev]

    def _upload(self, host: np.ndarray) -> mx.array:
        key = host.tobytes()
        if self._last is None or self._last[0] != key:
            self._last = (key, mx.array(host, dtype=mx.int32))
        return self._last[1]

    def __set__(self, obj, value) -> None:
        if value is None and not self.optional:
            raise ValueError(f"{type(obj).__name__}.{self.name} cannot be None")
        d = obj.__dict__
        d[self.base] = None if value is None else host_ints(value)
        d[self.pending], d[self.dev] = 0, None

    def host_of(self, obj) -> np.ndarray | None:
        """The host ints, with any pending shift applied (once, then kept)."""
        d = obj.__dict__
        base, pending = d.get(self.base), d.get(self.pending, 0)
        if pending:
            shifted = d[self.base] = host_ints(base + pending)
            d[self.pending] = 0
            memo = self._bounds
            if memo is not None and memo[0] is base:  # the extremes move with the ints
                self._bounds = (shifted, memo[1] + pending, memo[2] + pending)
            base = shifted
        return base

    def shift(self, obj, n: int) -> None:
        """``obj.<name> += n`` in the decode hot path: the host only counts n. The device
        array is made by the first layer that reads it in the next step and shared by
        the others (``__get__``). Integer adds: the same values, hence the same bits of
        RoPE, as an upload of the host sum."""
        d = obj.__dict__
        if d[self.base] is not None:  # an optional vector that is not tracked: no-op
            d[self.pending] += n
            d[self.dev] = None

    def any_nonzero(self, obj) -> bool:
        """Whether any row's int is not 0 (e.g. any row left-padded)."""
        low, high = self.bounds(obj)
        return low != 0 or high != 0

    def is_set(self, obj) -> bool:
        return obj.__dict__.get(self.base) is not None

    def rows(self, obj) -> int:
        return len(obj.__dict__[self.base])

    def bounds(self, obj) -> tuple[int, int]:
        """(min, max) over the rows, memoized per host array: a pending shift moves both,
        so a decode step asks without numpy."""
        d = obj.__dict__
        base, memo = d[self.base], self._bounds
        if memo is None or memo[0] is not base:
            low, high = (int(base.min()), int(base.max())) if base.size else (0, 0)
            memo = self._bounds = (base, low, high)
        pending = d[self.pending]
        return memo[1] + pending, memo[2] + pending


def _adds_offsets_on_device() -> bool:
    """Whether a step's new row ints are a lazy add on the last step's device array
    (the CPU backend: no numpy, ~15 us of a 2-layer llama step) rather than an upload.
    GPUs keep the one upload per step that the CUDA parity runs validated: an add puts
    its buffer elsewhere in time, and on CUDA kernels were seen to pick by alignment."""
    return mx.default_device().type == mx.cpu


class _HostInts:
    """``cache.<name>_host``: the read-only host view of a ``RowInts``."""

    def __init__(self, ints: RowInts):
        self.ints = ints

    def __get__(self, obj, owner=None):
        return self if obj is None else self.ints.host_of(obj)

    def __set__(self, obj, value) -> None:
        raise AttributeError(f"assign {type(obj).__name__}.{self.ints.name}, not "
                             f"{self.ints.host}: the device copy would go stale")


def roll_rows(x: mx.array, shifts: np.ndarray) -> mx.array:
    """Roll row b of ``x`` (B, H, L, D) right by ``shifts[b]`` along L, wrapping around.

    The same move as mlx-lm's dynamic roll (over the whole L axis, so unused columns at
    the end wrap to the front, where the mask hides them). E.g. one row ``[a b c _]``
    rolled by 1 is ``[_ a b c]``.
    """
    n = x.shape[2]
    if n == 0 or not np.any(shifts % n):
        return x
    idx = (np.arange(n)[None, :] - np.asarray(shifts)[:, None]) % n
    return mx.take_along_axis(x, mx.array(idx, dtype=mx.int32)[:, None, :, None], axis=2)


def pad_columns(x: mx.array, left: int, right: int) -> mx.array:
    """Zero columns on both sides of L; a negative ``right`` cuts unused tail columns."""
    if right < 0:
        x, right = x[..., :right, :], 0
    if left or right:
        x = mx.pad(x, [(0, 0), (0, 0), (left, right), (0, 0)])
    return x


def as_rows(indices) -> list[int]:
    return indices.tolist() if isinstance(indices, mx.array) else [int(i) for i in indices]


class BatchKV:
    """Full-attention batch KV cache (mlx-lm's ``BatchKVCache`` layout, own code)."""

    step = STEP
    offset = RowInts()
    left_padding = RowInts()

    def __init__(self, left_padding: Sequence[int]):
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.left_padding = left_padding
        self.offset = -self.left_padding_host
        self._idx = 0
        self._right_padding: np.ndarray | None = None  # set by prepare, rolled by finalize
        self._decode_masks = DecodeMasks()

    # -- the protocol the models speak ----------------------------------------------

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        prev, n = self._idx, keys.shape[2]
        if self.keys is None or prev + n > self.keys.shape[2]:
            self._grow(keys, values)
        type(self).offset.shift(self, n)
        self._idx += n
        self.keys[..., prev : self._idx, :] = keys
        self.values[..., prev : self._idx, :] = values
        return self.keys_and_values()

    def _grow(self, keys: mx.array, values: mx.array) -> None:
        """Add ceil(n / 256) * 256 zero columns; a partly used tail is cut first."""
        B, H, n, _ = keys.shape
        cols = (n + self.step - 1) // self.step * self.step
        new_k = mx.zeros((B, H, cols, keys.shape[3]), keys.dtype)
        new_v = mx.zeros((B, H, cols, values.shape[3]), values.dtype)
        if self.keys is None:
            self.keys, self.values = new_k, new_v
            return
        if self._idx % self.step:
            self.keys = self.keys[..., : self._idx, :]
            self.values = self.values[..., : self._idx, :]
        self.keys = mx.concatenate([self.keys, new_k], axis=2)
        self.values = mx.concatenate([self.values, new_v], axis=2)

    def keys_and_values(self) -> tuple[mx.array, mx.array]:
        return self.keys[..., : self._idx, :], self.values[..., : self._idx, :]

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None):
        """An array, (B, 1, N, _idx + N), as mlx-lm's, even at N = 1. The one exception:
        at N = 1 with no padded row the mask is all True, and it is dropped where that
        cannot change a bit (``drops_all_true_decode_mask``)."""
        if N == 1 and window_size is None:
            if (not return_array and self.drops_all_true_decode_mask()
                    and not type(self).left_padding.any_nonzero(self)):
                return None
            return self._decode_masks(self._idx, self.left_padding_host)
        return causal_mask(N, self._idx, left_padding=self.left_padding_host, window=window_size)

    @staticmethod
    def drops_all_true_decode_mask() -> bool:
        """True on the CPU backend. It has no fused attention: SDPA applies a bool mask
        as ``where(mask, scores, min)``, which an all-True mask leaves equal to the bit,
        at the cost of a broadcast and a select per layer (~5% of a B=1 decode step of
        the tiny models). On a GPU a mask array selects other kernels (other bits), so
        l1 keeps it there, as BatchGenerator passes it."""
        return mx.default_device().type == mx.cpu

    @property
    def state(self):
        return self.keys, self.values, self.offset, self.left_padding, self._idx

    @state.setter
    def state(self, v) -> None:
        self.keys, self.values, self.offset, self.left_padding, self._idx = v

    def size(self) -> int:
        return self._idx

    def empty(self) -> bool:
        return self.keys is None

    @property
    def nbytes(self) -> int:
        return 0 if self.keys is None else self.keys.nbytes + self.values.nbytes

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self._idx, n)
        self._idx -= n
        self.offset = self.offset_host - n
        return n

    # -- prefill of right-padded prompts ----------------------------------------------

    def prepare(self, *, left_padding=None, lengths=None, right_padding=None) -> None:
        """``left_padding`` adds padding to an empty cache; ``right_padding`` (with the
        prompts right-padded to one length) is moved to the left by ``finalize``."""
        if left_padding is not None:
            if self.keys is not None:
                raise ValueError("left padding can only be added to an empty BatchKV")
            self.left_padding = self.left_padding_host + host_ints(left_padding)
            self.offset = self.offset_host - host_ints(left_padding)
        if right_padding is not None and max(right_padding) > 0:
            self._right_padding = host_ints(right_padding)

    def finalize(self) -> None:
        """Right-justify right-padded rows. Prompts [5, 6] and [7] prefilled as
        ``[5 6] [7 _]`` become ``[5 6] [_ 7]``: left_padding [0, 1], offset [2, 1]."""
        if self._right_padding is None:
            return
        pad = self._right_padding
        if self.keys is not None:
            self.keys = roll_rows(self.keys, pad)
            self.values = roll_rows(self.values, pad)
        self.offset = self.offset_host - pad
        self.left_padding = self.left_padding_host + pad
        self._right_padding = None

    # -- dynamic B ---------------------------------------------------------------------

    def filter(self, indices) -> None:
        """Keep rows ``indices`` (in that order), then drop the columns every kept row
        pads: left_padding [3, 1, 2] filtered to rows [0, 2] trims 2 -> [1, 0]."""
        rows = take_rows(self, indices)
        if self._right_padding is not None:  # mlx-lm forgets this one (never hit there)
            self._right_padding = self._right_padding[rows]
        trim = int(self.left_padding_host.min()) if rows else 0
        if trim > 0:
            if self.keys is not None:
                self.keys = self.keys[..., trim:, :]
                self.values = self.values[..., trim:, :]
            self._idx -= trim  # mlx-lm does this even with no keys: _idx can go negative
            self.left_padding = self.left_padding_host - trim

    def extend(self, other: BatchKV) -> None:
        """Append ``other``'s rows. Both sides are padded so their write columns line up
        at ``max(_idx)`` and their widths at ``max(L)``: _idx 3 and 5 -> the first side
        gets 2 more left-padding columns."""
        if self._right_padding is not None or other._right_padding is not None:
            raise ValueError("finalize() both caches before extend()")
        extend_aligned(self, other)

    def extract(self, idx: int) -> KVCache:
        """Row ``idx`` as mlx-lm's single-row ``KVCache`` (padding dropped)."""
        pad = int(self.left_padding_host[idx])
        return kv_row(
            self.keys[idx : idx + 1, :, pad : self._idx],
            self.values[idx : idx + 1, :, pad : self._idx],
        )

    @classmethod
    def merge(cls, caches: Sequence[KVCache]) -> BatchKV:
        """Left-pad single-row caches to the longest: sizes [2, 4] -> left_padding [2, 0],
        keys exactly 4 columns wide, _idx 4."""
        sizes = [c.size() for c in caches]
        width = max(sizes)
        if width == 0:
            return cls([0] * len(caches))
        full = [c for c in caches if c.keys is not None]
        H = max(c.keys.shape[1] for c in full)
        Dk = max(c.keys.shape[3] for c in full)
        Dv = max(c.values.shape[3] for c in full)
        dtype = full[0].keys.dtype
        pads = [width - s for s in sizes]
        keys = mx.zeros((len(caches), H, width, Dk), dtype)
        values = mx.zeros((len(caches), H, width, Dv), dtype)
        for i, (p, c) in enumerate(zip(pads, caches)):
            if c.keys is not None:
                keys[i : i + 1, :, p : p + c.offset] = c.keys[..., : c.offset, :]
                values[i : i + 1, :, p : p + c.offset] = c.values[..., : c.offset, :]
        cache = cls(pads)
        cache.keys, cache.values = keys, values
        cache.offset = cache.offset_host + width
        cache._idx = width
        return cache


def take_rows(cache, indices) -> list[int]:
    """The row half of ``filter`` (BatchKV and BatchRing): keep rows ``indices`` of the
    keys, values and per-row ints, in that order. Returns the rows as a list."""
    rows = as_rows(indices)
    if cache.keys is not None:
        take = mx.array(rows, dtype=mx.int32)
        cache.keys, cache.values = cache.keys[take], cache.values[take]
    cache.offset = cache.offset_host[rows]
    cache.left_padding = cache.left_padding_host[rows]
    return rows


def extend_aligned(cache, other) -> None:
    """The body of ``extend`` (BatchKV and BatchRing): append ``other``'s rows, both
    sides padded so their write columns line up at ``max(_idx)`` and their widths at
    ``max(L)``. With no keys on either side only the per-row ints are joined."""
    if cache.keys is None and other.keys is None:
        cache.left_padding = np.concatenate([cache.left_padding_host, other.left_padding_host])
        cache.offset = np.concatenate([cache.offset_host, other.offset_host])
        return
    ref = cache if cache.keys is not None else other
    idx = max(cache._idx, other._idx)
    width = max(c.keys.shape[2] for c in (cache, other) if c.keys is not None)
    parts = [pad_for_extend(c, ref, idx, width) for c in (cache, other)]
    cache.keys = mx.concatenate([p[0] for p in parts])
    cache.values = mx.concatenate([p[1] for p in parts])
    cache.left_padding = np.concatenate([p[2] for p in parts])
    cache.offset = np.concatenate([cache.offset_host, other.offset_host])
    cache._idx = idx


def pad_for_extend(c, ref, idx: int, width: int):
    """For ``extend`` (BatchKV and BatchRing): ``c``'s keys, values and left padding shifted right to write column ``idx`` and
    padded to ``width`` columns (``ref`` supplies shapes when ``c`` has no keys yet)."""
    k, v = c.keys, c.values
    if k is None:
        B = len(c.offset_host)
        k = mx.zeros((B, ref.keys.shape[1], 0, ref.keys.shape[3]), ref.keys.dtype)
        v = mx.zeros((B, ref.values.shape[1], 0, ref.values.shape[3]), ref.keys.dtype)
    left = idx - c._idx
    right = width - k.shape[2] - left
    return pad_columns(k, left, right), pad_columns(v, left, right), c.left_padding_host + left
