"""PagedKV presents l1's BatchKV layout exactly: the same keys (bit for bit), offsets,
left padding and masks, through prefill, finalize, filter, extend, extract and merge,
while its rows sit in blocks with no padding stored."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.caches.split import split_rows
from batchlab.engine.paths.paged.block_manager import BlockManager
from batchlab.engine.paths.paged.cache import PagedKV
from batchlab.engine.paths.paged.pool import LayerPool


def _kv(b: int, n: int, seed: int) -> tuple[mx.array, mx.array]:
    rng = np.random.default_rng(seed)
    k = mx.array(rng.standard_normal((b, 2, n, 4)).astype(np.float32))
    return k, k * 2 + 1


def _same(paged: PagedKV, ref: BatchKV) -> None:
    """Equal view: offsets, padding, write column, masks and every unpadded key."""
    assert paged.offset_host.tolist() == ref.offset_host.tolist()
    assert paged.left_padding_host.tolist() == ref.left_padding_host.tolist()
    assert paged._idx == ref._idx
    pk, pv = paged.keys_and_values()
    rk, rv = ref.keys_and_values()
    assert pk.shape == rk.shape
    valid = (np.arange(ref._idx)[None, :] >= ref.left_padding_host[:, None])[:, None, :, None]
    assert np.array_equal(np.where(valid, np.array(pk), 0), np.where(valid, np.array(rk), 0))
    assert np.array_equal(np.where(valid, np.array(pv), 0), np.where(valid, np.array(rv), 0))
    assert np.array_equal(np.array(paged.make_mask(3)), np.array(ref.make_mask(3)))


def _pair(rows: int, block_size: int = 2):
    pool = LayerPool(BlockManager(block_size))
    return PagedKV([0] * rows, pool), BatchKV([0] * rows), pool


def test_ragged_prefill_then_decode_matches_batch_kv_and_stores_no_padding():
    paged, ref, pool = _pair(3)
    for c in (paged, ref):
        c.prepare(lengths=[3, 1, 4], right_padding=[1, 3, 0])
        c.update_and_fetch(*_kv(3, 4, 0))
        c.finalize()
    _same(paged, ref)
    assert [t.num_tokens for t in paged.rows] == [3, 1, 4]
    assert [len(t.blocks) for t in paged.rows] == [2, 1, 2]  # 5 blocks of 2, no padding
    for c in (paged, ref):
        c.update_and_fetch(*_kv(3, 1, 1))
    _same(paged, ref)
    assert paged.offset_host.tolist() == [4, 2, 5]


def test_filter_extend_split_extract_and_merge_match_batch_kv():
    paged, ref, pool = _pair(3)
    for c in (paged, ref):
        c.update_and_fetch(*_kv(3, 5, 2))
    other_p, other_r = PagedKV([0, 0], pool), BatchKV([0, 0])
    for c in (other_p, other_r):
        c.update_and_fetch(*_kv(2, 2, 3))
    twin = split_rows(paged, [1])  # the twin forks every table, then keeps row 1
    assert [pool.manager.blocks[t.blocks[0]].ref_count for t in paged.rows] == [1, 2, 1]
    assert twin.rows[0].blocks == paged.rows[1].blocks
    paged.filter([0, 2])
    ref.filter([0, 2])
    _same(paged, ref)
    paged.extend(other_p)
    ref.extend(other_r)
    _same(paged, ref)
    assert np.array_equal(np.array(paged.extract(2).keys), np.array(ref.extract(2).keys))
    rows = [KVCache(), KVCache()]
    for r, n, s in zip(rows, (3, 1), (4, 5)):
        r.update_and_fetch(*_kv(1, n, s))
    _same(PagedKV.merged_into(pool, rows), BatchKV.merge(rows))


def test_released_rows_give_every_block_back():
    paged, ref, pool = _pair(2)
    paged.update_and_fetch(*_kv(2, 5, 6))
    assert pool.manager.stats().num_used == 6
    paged.filter([1])
    assert pool.manager.stats().num_used == 3
    del paged
    assert pool.manager.stats().num_used == 0


def test_prompt_ids_seal_blocks_and_a_second_row_shares_them():
    pool = LayerPool(BlockManager(2))
    cache = PagedKV([0, 0], pool)
    cache.pending_ids = ([1, 2, 3], [1, 2, 9])
    cache.update_and_fetch(*_kv(2, 3, 7))
    a, b = cache.rows
    assert (a.blocks[0] == b.blocks[0], a.blocks[1] != b.blocks[1]) == (True, True)
    assert pool.manager.stats().num_hits == 1
    k, _ = cache.keys_and_values()
    assert np.array_equal(np.array(k[1, :, :2]), np.array(k[0, :, :2]))  # row 1 reads row 0's
