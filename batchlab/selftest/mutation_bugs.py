"""Seeded bugs found by mutation testing (docs/mutation.md): mutants that a
default-matrix cell does catch, but only a cell of one regime, which the campaign's
per-mutant budget did not reach (round 2), or only a cell added for them (round 3).
Kept here so the catch is checked on every self-test."""

from __future__ import annotations

from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.core import scheduler
from batchlab.engine.core.sampler import BatchSampler
from batchlab.engine.paths.paged.block_manager import BlockManager
from batchlab.selftest.inject import Patch, during


def queued_row_batch_sampler() -> list[Patch]:
    """A row inserted with its own sampler gets the batch's sampler class instead of the
    path's (``Scheduler.insert`` builds ``Sequence.start(request)`` without
    ``self.row_sampler``): on l1 nothing changes (its row sampler is BatchSampler), but on
    the invariant path the row then draws from the batch's random stream, not its own key,
    so its tokens at temperature > 0 depend on its neighbours."""
    return [during(scheduler.Scheduler, "insert", "row_sampler", lambda self: BatchSampler)]


def evict_keeps_index_entry() -> list[Patch]:
    """A cached prefix block handed out again is reset (its hash and ids dropped) but its
    entry in the manager's hash index stays (``BlockManager._forget`` with its test
    inverted, mutant ``_forget__mutmut_2``): once the block is rewritten with the same ids
    after another first block and sealed, a row whose prompt begins with the old prefix
    finds the stale entry, the ids check passes, and it reads keys computed in another
    context. The ids check hides every other reuse, so only a block rewritten with equal
    ids tells."""

    def forget(self: BlockManager, block) -> None:
        block.hash, block.ids = None, ()

    return [Patch(owner=BlockManager, name="_forget", value=forget)]


def empty_ring_merge_padded() -> list[Patch]:
    """A merge of rings that are all empty (a row parked while still queued, resumed
    alone) gives every row one column of left padding instead of none (``BatchRing.merge``
    with ``[1] * n``, mutant ``merge__mutmut_39``): the resumed row's prefill then masks
    its own first key. No cell merged only empty caches until park-queued."""
    clean = BatchRing.merge.__func__

    def merge(cls, caches):
        if all(c.keys is None for c in caches):
            return cls(caches[0].max_size, [1] * len(caches))
        return clean(cls, caches)

    return [Patch(owner=BatchRing, name="merge", value=classmethod(merge))]


def quantized_empty_merge_unquantized() -> list[Patch]:
    """A quantized path's merge of rows that are all empty (a row parked while still
    queued, resumed) takes l1's ``BatchKV.merge``: the resumed row then runs its whole
    life on bf16 keys and values on a path that says 8-bit (mutants of
    ``merge_quantized``'s empty case, 27 and 47, had no cell until round 6's
    kv8 park-queued cells, whose serial quantized oracle replays a queued park)."""
    from batchlab.engine.caches.kv import BatchKV
    from batchlab.engine.paths.quantized.kv import BatchQuantizedKV

    clean = BatchQuantizedKV.merge_quantized.__func__

    def merge_quantized(cls, caches, quant):
        if all(c.keys is None for c in caches):
            return BatchKV.merge(caches)
        return clean(cls, caches, quant)

    return [Patch(owner=BatchQuantizedKV, name="merge_quantized",
                  value=classmethod(merge_quantized))]


def quantized_ring_join_keeps_unused_tail() -> list[Patch]:
    """An mlx-lm ring row joining a quantized batch is put in temporal order with the
    wrap test off by one (``idx <= offset``: mutant ``ring_temporal__mutmut_4``): a
    prompt cache that never filled its window (written one id at a time, so its buffer is
    the window wide) is taken as wrapped, and its unused zero columns join the row as
    keys. l1's ring merge keeps the newest ``size()`` columns and hides it; the quantized
    join packs the whole array (round 6's kv8 prefix-decoded cell)."""
    import mlx.core as mx

    from batchlab.engine.paths.quantized import ring as quantized_ring

    def ring_temporal(cache, v):
        keep, idx = cache.keep, cache._idx
        if idx == v.shape[2]:
            return v
        if idx <= cache.offset:
            return mx.concatenate([v[..., :keep, :], v[..., idx:, :], v[..., keep:idx, :]],
                                  axis=2)
        return v[..., :idx, :]

    return [Patch(owner=quantized_ring, name="ring_temporal", value=ring_temporal)]


def row_attention_not_dispatched() -> list[Patch]:
    """The invariant path never routes mlx-lm's attention helper to its row kernels
    (``install_dispatch`` a no-op: mutants ``install_dispatch`` 15, 17, 18, 19 and
    ``make_dispatch`` 10 of round 3's sample). Blocked on the CPU, the decode batch is
    padded to whole 8-row GEMM blocks while each cache holds the batch's own rows, so
    mlx-lm's helper meets queries and keys of different batch sizes: a crash, wherever
    prompts are prefilled together (no ring or state); round 3 had called these mutants
    "gpu only in effect" (round 7: reports/mutation/2026-12-02-r7/)."""
    import sys

    from batchlab.engine.paths.invariant import path as invariant_path

    patches = [Patch(owner=invariant_path, name="install_dispatch", value=lambda: None)]
    # a dispatch an earlier cell of this process installed goes too: mlx-lm's own helper
    for name, module in list(sys.modules.items()):
        helper = getattr(module, "scaled_dot_product_attention", None)
        if name.startswith("mlx_lm.models.") and hasattr(helper, "original"):
            patches.append(Patch(owner=module, name="scaled_dot_product_attention",
                                 value=helper.original))
    return patches
