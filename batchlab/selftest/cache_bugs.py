"""Seeded bugs in the batch caches and masks (``batchlab/engine/{kv,ring,state,mask}.py``).

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog. Names imported into another engine module are patched there too (kv.py
imports ``causal_mask``), since a patch of the defining module alone would not reach it.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from batchlab.engine.caches import kv, mask, ring
from batchlab.engine.caches.kv import BatchKV, as_rows
from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.caches.state import BatchList, BatchState
from batchlab.selftest.inject import Patch, applied, original, wrapped

# -- positions and masks -------------------------------------------------------------


class _ScalarOffset:
    """Reads give ``_idx`` for every row; writes still go to the per-row ints, so the
    cache's own bookkeeping stays right and only what the model reads is wrong."""

    def __init__(self, per_row):
        self.per_row = per_row

    def __get__(self, obj, owner=None):
        return self if obj is None else mx.array(obj._idx, dtype=mx.int32)

    def __set__(self, obj, value) -> None:
        self.per_row.__set__(obj, value)

    def __getattr__(self, name: str):  # shift, any_nonzero: the per-row bookkeeping
        return getattr(self.per_row, name)


def scalar_offset() -> list[Patch]:
    """One scalar RoPE offset for the batch (the shared write column ``_idx``, what a
    single-row KVCache reports) instead of one per row: left-padded rows are roped as
    if their padding were tokens."""
    return [Patch(owner=BatchKV, name="offset", value=_ScalarOffset(original(BatchKV, "offset")))]


def mask_hides_first_key() -> list[Patch]:
    """``j > left_padding`` instead of ``j >= left_padding``: each row's first real key
    (column 0 for an unpadded row) is masked out. kv.py imported the name, so patch both."""
    clean = original(mask, "causal_mask")

    def buggy(N, offset, left_padding, window=None):
        out = clean(N, offset, np.zeros(len(left_padding), np.int64), window)
        lp = mx.array(np.asarray(left_padding), dtype=mx.int32).reshape(-1, 1, 1, 1)
        return out & (lp < mx.arange(offset + N)[None])

    return [Patch(owner=mask, name="causal_mask", value=buggy),
            Patch(owner=kv, name="causal_mask", value=buggy)]


def decode_mask_dropped() -> list[Patch]:
    """No mask at the N=1 decode step (a single-row cache's shortcut: one query sees
    every key anyway): left-padded rows attend to their padding columns."""

    def make(clean):
        def buggy(self, N, *args, **kwargs):
            return None if N == 1 else clean(self, N, *args, **kwargs)
        return buggy

    return [wrapped(BatchKV, "make_mask", make)]


def ring_mask_not_rolled() -> list[Patch]:
    """The wrapped ring's decode mask left in temporal order: keys sit in ring order, so
    padding columns are masked at the wrong places once the pointer moves."""

    def make(clean):
        def buggy(N, *, max_size, seen, idx, rotated, left_padding, **kw):
            out = clean(N, max_size=max_size, seen=seen, idx=idx, rotated=rotated,
                        left_padding=left_padding, **kw)
            wrapped_now = N == 1 and (rotated or idx >= max_size)
            if wrapped_now and out is not None:  # undo the roll ring_mask made
                out = mx.roll(out, -((0 if idx >= max_size else idx) + 1), axis=-1)
            return out
        return buggy

    return [wrapped(ring, "ring_mask", make)]


# -- prefill -------------------------------------------------------------------------


def finalize_skips_roll() -> list[Patch]:
    """``finalize`` forgets to right-justify: right padding stays after short prompts,
    decode writes after it and the offsets count the padding as positions."""

    def kv_finalize(self):
        self._right_padding = None

    def ring_finalize(self):
        self._lengths = None

    return [Patch(owner=BatchKV, name="finalize", value=kv_finalize),
            Patch(owner=BatchRing, name="finalize", value=ring_finalize)]


# -- filter (evict) ------------------------------------------------------------------


def filter_counters_only() -> list[Patch]:
    """``filter`` trims the shared left padding in ``_idx``/``left_padding`` but keeps
    the padding columns in the arrays: every key then sits ``trim`` columns late."""

    def make(clean):
        def buggy(self, indices):
            keep = None
            if self.keys is not None:
                take = mx.array(as_rows(indices), dtype=mx.int32)
                keep = self.keys[take], self.values[take]
            clean(self, indices)
            if keep is not None:
                self.keys, self.values = keep
        return buggy

    return [wrapped(BatchKV, "filter", make)]


def filter_arrays_only() -> list[Patch]:
    """The other half: ``filter`` slices the padding columns off the arrays but leaves
    ``_idx``/``left_padding`` as they were, so the mask and the next write are off."""

    def make(clean):
        def buggy(self, indices):
            lp = self.left_padding_host[as_rows(indices)]
            clean(self, indices)
            trim = int(lp.min()) if len(lp) else 0
            if trim > 0:
                self._idx += trim
                self.left_padding = self.left_padding_host + trim
        return buggy

    return [wrapped(BatchKV, "filter", make)]


def filter_trims_max() -> list[Patch]:
    """The shared padding trimmed by the LARGEST kept padding (max for min): rows with
    less padding lose their oldest real keys, and their padding goes negative."""

    def make(clean):
        def buggy(self, indices):
            lp = self.left_padding_host[as_rows(indices)]
            clean(self, indices)
            extra = int(lp.max() - lp.min()) if len(lp) else 0
            if extra > 0 and self.keys is not None:
                self.keys, self.values = self.keys[..., extra:, :], self.values[..., extra:, :]
                self._idx -= extra
                self.left_padding = self.left_padding_host - extra
        return buggy

    return [wrapped(BatchKV, "filter", make)]


def ssm_filter_truncates() -> list[Patch]:
    """SSM/conv state not filtered by the kept rows: the arrays are cut to the first
    ``len(keep)`` rows, so evicting row 0 hands every later row its neighbour's state."""

    def make(clean):
        def buggy(self, indices):
            before = list(self.cache)
            clean(self, indices)
            n = len(as_rows(indices))
            self.cache = [None if c is None else c[:n] for c in before]
        return buggy

    return [wrapped(BatchState, "filter", make)]


def ssm_padding_through_state() -> list[Patch]:
    """The SSM mask ignores ``lengths``: a right-padded prefill runs the pad tokens of
    short prompts through their conv/SSM state (mlx-lm issue 1906's kind of bug)."""

    def make_mask(self, N):
        return mask.ssm_mask(N, self.left_padding_host, None)

    return [Patch(owner=BatchState, name="make_mask", value=make_mask)]


def cache_list_prepares_first_part() -> list[Patch]:
    """A layer holding several caches (``CacheList``: falcon-h1's Mamba-2 state and
    attention KV) forwards ``prepare`` to its first part only: the attention part never
    learns the right padding of a ragged prefill, ``finalize`` rolls nothing, and short
    rows decode with their pad keys in the middle of their context."""

    def prepare(self, **kwargs):
        self.caches[0].prepare(**kwargs)

    return [Patch(owner=BatchList, name="prepare", value=prepare)]


# -- extend (join) -------------------------------------------------------------------


def extend_pads_right() -> list[Patch]:
    """``extend`` pads the side with the smaller write index on the RIGHT, not the left:
    its keys stay at the old columns, a gap of zero keys opens before the next write."""

    def make(clean):
        def buggy(c, ref, idx, width):
            k, v, lp = clean(c, ref, idx, width)
            shift = idx - c._idx  # clean put this many columns on the left: move them right
            if shift:
                k, v = mx.roll(k, -shift, axis=2), mx.roll(v, -shift, axis=2)
                lp = lp - shift
            return k, v, lp
        return buggy

    return [wrapped(kv, "pad_for_extend", make)]


def ring_extend_skips_temporal_order() -> list[Patch]:
    """``BatchRing.extend`` joins a wrapped ring and a fresh one without unrolling them
    first: the rows' columns line up by buffer index, not by age."""

    def make(clean):
        def buggy(self, other):
            with applied([Patch(owner=BatchRing, name="_temporal_order", value=lambda c: None)]):
                clean(self, other)
        return buggy

    return [wrapped(BatchRing, "extend", make)]


# -- the ring's first decode write -----------------------------------------------------


def ring_trim_keeps_oldest() -> list[Patch]:
    """The first decode write cuts an over-long prefill (``max_size + S - 1`` columns)
    to its OLDEST ``max_size`` columns instead of its newest: after a prompt longer than
    the window, the ring holds keys that fell out of the window and lacks the last ones."""

    def make(clean):
        def buggy(self, keys, values):
            over = 0 if self.keys is None else self.keys.shape[2] - self.max_size
            if over > 0 and self._lengths is None:
                self.keys = self.keys[..., : self.max_size, :]
                self.values = self.values[..., : self.max_size, :]
                self._idx = self.max_size
                self.left_padding = self.left_padding_host - over
            return clean(self, keys, values)
        return buggy

    return [wrapped(BatchRing, "_write_one", make)]


def ring_evict_keeps_padding() -> list[Patch]:
    """A write into a wrapped ring evicts every row's oldest column but ``left_padding``
    is not lowered: the mask keeps hiding as many columns as the row had padding, now
    real keys, so padded rows lose context once the ring wraps."""

    def make(clean):
        def buggy(self, keys, values):
            out = clean(self, keys, values)
            if self.rotated:
                self.left_padding_ints.shift(1)  # undo the eviction's -1
            return out
        return buggy

    return [wrapped(BatchRing, "_write_one", make)]
