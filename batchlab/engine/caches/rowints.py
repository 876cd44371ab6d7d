"""Per-row int vectors of a batch cache (``offset``, ``left_padding``, ``lengths``), kept on
the host and read by the model as int32 ``mx.array``.

A cache holds one ``RowInts`` per vector (``cache.offset_ints``) and exposes it through a
``RowIntsAttribute``, so the model reads ``cache.offset`` (the device array), bookkeeping
reads ``cache.offset_host`` (read-only numpy) and code assigns ``cache.offset = ...``
(list, numpy or mx). Host ints build no lazy graph, so mlx-lm's ``mx.depends(keys,
(left_padding, offset))`` ties are not needed.

The decode hot path (every layer, every step) stays out of numpy: ``shift`` (each layer's
``offset += n``) only counts on the host, and the device array is made once per step and
shared by every layer of the batch through one ``RowUploads``, found by the identity of
the host array (``layers.share_uploads`` hands the layers of a batch the same one).
``bounds`` (min and max: "is any row padded?") moves with the shifts, without numpy.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np


def host_ints(value) -> np.ndarray:
    """A read-only int64 numpy copy of a list, numpy array or mx array of row ints.

    A 1-D int64 array that owns its data (the result of arithmetic such as
    ``cache.offset_host + n``) is taken as is, not copied. The array is made read-only,
    so a caller that kept it and tries to write it gets an error, never a silent change
    (arrays are shared between layers)."""
    fresh = type(value) is np.ndarray and value.dtype == np.int64 and value.ndim == 1
    if fresh and (value.flags.owndata or not value.flags.writeable):
        value.flags.writeable = False
        return value
    out = np.array(value.tolist() if isinstance(value, mx.array) else value, dtype=np.int64)
    out = out.reshape(-1)
    out.flags.writeable = False  # write through the attribute, never in place
    return out


def _adds_offsets_on_device() -> bool:
    """Whether a step's new row ints are a lazy add on the last step's device array
    (the CPU backend: no numpy in the step) rather than an upload. GPUs keep the one
    upload per step that the CUDA parity runs validated: an add puts its buffer
    elsewhere in time, and on CUDA kernels were seen to pick by alignment."""
    return mx.default_device().type == mx.cpu


class RowUploads:
    """The device arrays of one kind of row ints, shared by the layers of a batch: every
    layer of a step holds the same ints, so a 32-layer model uploads them once per step,
    not 32 times. Device arrays are never written in place, so sharing them is safe."""

    def __init__(self):
        self.last: tuple[bytes, mx.array] | None = None  # the last upload
        # (host array, pending shift, device array of their sum): the last read
        self.shifted: tuple[np.ndarray, int, mx.array] | None = None

    def upload(self, host: np.ndarray) -> mx.array:
        key = host.tobytes()
        if self.last is None or self.last[0] != key:
            self.last = (key, mx.array(host, dtype=mx.int32))
        return self.last[1]


class RowInts:
    """One per-row int vector: host ints, a pending shift, and the device array.
    ``optional=True`` allows ``None`` (nothing tracked: ArraysCache's padding/lengths)."""

    def __init__(self, label: str, *, optional: bool = False):
        self.label = label  # "BatchKV.offset", for errors
        self.optional = optional
        self.uploads = RowUploads()
        self._base: np.ndarray | None = None
        self._pending = 0
        self._dev: mx.array | None = None
        self._bounds: tuple[np.ndarray, int, int] | None = None  # (host array, min, max)

    def copy(self) -> RowInts:
        """An independent twin (same ints, its own pending shift); uploads are the
        batch's to share (``layers.share_uploads``), so the twin starts with its own."""
        twin = RowInts(self.label, optional=self.optional)
        twin._base, twin._pending, twin._dev = self._base, self._pending, self._dev
        return twin

    def set(self, value) -> None:
        if value is None and not self.optional:  # not gated: misuse
            raise ValueError(f"{self.label} cannot be None")
        self._base = None if value is None else host_ints(value)
        self._pending, self._dev = 0, None

    @property
    def is_set(self) -> bool:
        return self._base is not None

    def __len__(self) -> int:
        return len(self._base)

    @property
    def host(self) -> np.ndarray | None:
        """The host ints, with any pending shift applied (once, then kept)."""
        base, pending = self._base, self._pending
        if pending:
            shifted = self._base = host_ints(base + pending)
            self._pending = 0
            memo = self._bounds
            if memo is not None and memo[0] is base:  # the extremes move with the ints
                self._bounds = (shifted, memo[1] + pending, memo[2] + pending)
            base = shifted
        return base

    @property
    def device(self) -> mx.array | None:
        dev = self._dev
        if dev is None and self._base is not None:
            dev = self._dev = self._make_device()
        return dev

    def _make_device(self) -> mx.array:
        base, pending, uploads = self._base, self._pending, self.uploads
        memo = uploads.shifted
        if memo is not None and memo[0] is not base and memo[1] == pending \
                and np.array_equal(memo[0], base):
            base = self._base = memo[0]  # equal ints in another layer's array: share it
        if memo is None or memo[0] is not base or memo[1] != pending:
            if memo is not None and memo[0] is base and _adds_offsets_on_device():
                dev = memo[2] + (pending - memo[1])  # the last step's, one lazy add
            else:
                dev = uploads.upload(host_ints(base + pending) if pending else base)
            memo = uploads.shifted = (base, pending, dev)
        return memo[2]

    def shift(self, n: int) -> None:
        """``+= n`` in the decode hot path: the host only counts n; the device array is
        made by the first layer that reads it in the next step and shared by the others.
        Integer adds: the same values, hence the same bits of RoPE, as an upload of the
        host sum. A vector that is not tracked (``None``) stays so."""
        if self._base is not None:
            self._pending += n
            self._dev = None

    def bounds(self) -> tuple[int, int]:
        """(min, max) over the rows, memoized per host array: a pending shift moves both,
        so a decode step asks without numpy."""
        base, memo = self._base, self._bounds
        if memo is None or memo[0] is not base:
            low, high = (int(base.min()), int(base.max())) if base.size else (0, 0)
            memo = self._bounds = (base, low, high)
        return memo[1] + self._pending, memo[2] + self._pending

    def any_nonzero(self) -> bool:
        """Whether any row's int is not 0 (e.g. any row left-padded)."""
        low, high = self.bounds()
        return low != 0 or high != 0


class RowIntsAttribute:
    """``cache.<name>``: the device array of ``cache.<name>_ints``; assigning sets the
    ints. Also puts the read-only host view ``cache.<name>_host`` on the class."""

    def __set_name__(self, owner, name: str) -> None:
        self.name, self.slot = name, f"{name}_ints"
        setattr(owner, f"{name}_host", _HostView(self))

    def __get__(self, obj, owner=None):
        return self if obj is None else obj.__dict__[self.slot].device

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot].set(value)


class _HostView:
    """``cache.<name>_host``: the host ints of a ``RowIntsAttribute``."""

    def __init__(self, attribute: RowIntsAttribute):
        self.attribute = attribute

    def __get__(self, obj, owner=None):
        return self if obj is None else obj.__dict__[self.attribute.slot].host

    def __set__(self, obj, value) -> None:  # not gated: misuse
        name = self.attribute.name
        raise AttributeError(f"assign {type(obj).__name__}.{name}, not {name}_host: the "
                             "device copy would go stale")
