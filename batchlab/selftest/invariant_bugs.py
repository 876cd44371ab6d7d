"""Seeded bugs that break batch invariance (``batchlab/engine/{invariant,window}.py``).

They are caught by the solo gate of ``matrices/invariant.toml``: a row's bits then depend
on its neighbours, so some row of a needle cell differs from its run alone. The first is
the negative control of issue 20: the invariant path with l1's ring (one ring pointer
shared by the batch), which is what the path exists to remove.
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.caches import state, window
from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.core.factory import BatchCaches
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.invariant import path as invariant
from batchlab.selftest.inject import Patch, original


def shared_ring_pointer() -> list[Patch]:
    """The invariant path keeps l1's ``BatchRing``: every row writes at one ring pointer
    shared by the batch, so a row's keys sit in an order set by its neighbours (l1 on a
    sliding-window model, the negative control: fp32 rows differ by ~1e-6)."""
    return [Patch(owner=invariant.InvariantScheduler, name="caches",
                                value=BatchCaches(ring_class=BatchRing))]


def window_decode_mask_dropped() -> list[Patch]:
    """``WindowKV.make_mask`` returns no mask at decode steps, so a short row attends to
    the padding columns its longer neighbours put in its window."""
    clean = original(window.WindowKV, "make_mask")

    def make_mask(self, N, return_array=False, window_size=None):
        return None if N == 1 else clean(self, N, return_array, window_size)

    return [Patch(owner=window.WindowKV, name="make_mask", value=make_mask)]


def window_cut_keeps_padding() -> list[Patch]:
    """When the buffer grows, the columns no window reads are cut but ``left_padding``
    is not lowered with them: the mask then hides real keys of the padded rows."""

    def cut(self):
        cut = self.view_start()
        if cut > 0:
            self.keys, self.values = self.keys[..., cut:, :], self.values[..., cut:, :]
            self._idx -= cut

    return [Patch(owner=window.WindowKV, name="_cut_unread", value=cut)]


def joiner_state_zeroed() -> list[Patch]:
    """A joiner's SSM / conv state is replaced by zeros when it is appended to the
    running batch (its prefill is lost), so it decodes differently than alone, where it
    starts the batch and is never appended."""
    clean = original(state.BatchState, "extend")

    def extend(self, other):
        other.cache = [None if c is None else mx.zeros_like(c) for c in other.cache]
        clean(self, other)

    return [Patch(owner=state.BatchState, name="extend", value=extend)]


def window_one_key_short() -> list[Patch]:
    """The invariant path's window mask hides one key too many (``window - 1``: the
    new key counted twice). Every row loses the same key alone and in a batch, so the
    solo gate passes; the second judge, against the batch oracle's golden, does not."""
    clean = original(window.WindowKV, "make_mask")

    def make_mask(self, N, return_array=False, window_size=None):
        return clean(self, N, return_array, (window_size or self.max_size) - 1)

    return [Patch(owner=window.WindowKV, name="make_mask", value=make_mask)]
def prefill_reads_right_padding() -> list[Patch]:
    """The invariant path's batched prefill (issue 28) hands its attention each row's
    keys up to the chunk's last column, the right padding included: a short prompt's
    queries then attend to keys of padding tokens, which its prefill alone does not have."""
    clean = original(invariant.RowKV, "prefill_spans")

    def prefill_spans(self, n):
        first, _, counts = clean(self, n)
        return first, tuple(self._idx for _ in first), counts

    return [Patch(owner=invariant.RowKV, name="prefill_spans", value=prefill_spans)]


def padded_decode_keeps_padding_rows() -> list[Patch]:
    """The invariant path's padded decode batch (issue 28: B padded to whole GEMM blocks)
    cuts the logits from the wrong end, keeping the padding rows' (token 0 at offset 0).
    A batch of exactly one block (B 8 at 8-row blocks) has no padding and is right, the
    same row alone is not: the solo gate fails; in batches that are padded too, only the
    second judge (the batch oracle's golden) sees it."""

    def decode_logprobs(self, inputs, caches):
        rows = len(inputs)
        pad = -rows % self.rows_per_gemm if self.pads_decode else 0
        if not pad:
            return Scheduler._decode_logprobs(self, inputs, caches)
        for cache in caches:
            cache.pad_rows = pad
        try:
            logits = self.model(mx.pad(inputs, (0, pad))[:, None], cache=caches)[-rows:, -1, :]
        finally:
            for cache in caches:
                cache.pad_rows = 0
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    return [Patch(owner=invariant.InvariantScheduler, name="_decode_logprobs",
                  value=decode_logprobs)]
