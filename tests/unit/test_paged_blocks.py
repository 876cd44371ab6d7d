"""The paged path's block manager: tables, reference counts, hashes, the shared-block refusal, LRU.

Pure bookkeeping (no model, no arrays): every assertion is an exact value.
"""

from __future__ import annotations

import pytest

from batchlab.engine.paths.paged.block import NO_PARENT, block_hash
from batchlab.engine.paths.paged.block_manager import BlockManager, OutOfBlocks
from batchlab.engine.paths.paged.table import BlockTable


def _refs(m: BlockManager) -> list[int]:
    return [b.ref_count for b in m.blocks]


def test_rows_grow_block_by_block_with_no_padding():
    m = BlockManager(block_size=4, num_blocks=6)
    a, b = BlockTable(), BlockTable()
    assert m.append(a, [None] * 5) == [4, 5, 6, 7, 8]  # block 1, then block 2
    assert m.append(b, [None]) == [12]  # block 3: a one-token row holds one block
    assert m.append(a, [None] * 4) == [9, 10, 11, 16]  # fills block 2, opens 4
    assert (a.blocks, a.num_tokens, b.blocks) == ([1, 2, 4], 9, [3])
    assert _refs(m) == [0, 1, 1, 1, 1, 0, 0]


def test_release_frees_last_block_first_and_reuses_the_oldest_free():
    m = BlockManager(block_size=2, num_blocks=4)
    a = BlockTable()
    m.append(a, [None] * 6)  # blocks 1 2 3
    m.release(a)
    assert (a.blocks, a.num_tokens) == ([], 0)
    assert list(m.free) == [4, 3, 2, 1]  # 4 never used; a's tail freed before its head
    b = BlockTable()
    m.append(b, [None] * 4)
    assert b.blocks == [4, 3]


def test_fixed_pool_raises_when_full_and_a_growable_one_doubles():
    m = BlockManager(block_size=2, num_blocks=2)
    t = BlockTable()
    m.append(t, [None] * 4)
    with pytest.raises(OutOfBlocks, match="all 2 KV blocks are in use"):
        m.append(t, [None])
    g = BlockManager(block_size=2, initial_blocks=2)
    m2 = BlockTable()
    g.append(m2, [None] * 5)
    assert (m2.blocks, g.capacity) == ([1, 2, 3], 5)


def test_hash_chains_the_parent():
    h0 = block_hash(NO_PARENT, [1, 2])
    assert h0 == block_hash(NO_PARENT, [1, 2])  # stable
    assert block_hash(h0, [3, 4]) != block_hash(NO_PARENT, [3, 4])
    assert block_hash(h0, [3, 4]) == block_hash(block_hash(NO_PARENT, [1, 2]), [3, 4])
    assert 0 <= h0 < 2**63


def test_a_shared_prompt_is_stored_once():
    m = BlockManager(block_size=2, num_blocks=8)
    a, b = BlockTable(), BlockTable()
    m.append(a, [5, 6, 7, 8, 9])
    m.seal(a)
    m.append(b, [5, 6, 7, 8, 1])  # same two full blocks, then diverges inside block 3
    m.seal(b)
    assert (a.blocks, b.blocks) == ([1, 2, 3], [1, 2, 6])  # b's own 4 and 5 freed
    assert _refs(m)[:7] == [0, 2, 2, 1, 0, 0, 1]
    h1 = block_hash(block_hash(NO_PARENT, [5, 6]), [7, 8])
    assert (m.blocks[1].ids, m.blocks[2].hash) == ((5, 6), h1)
    s = m.stats()
    assert (s.num_queries, s.num_hits, s.hit_rate, s.num_used) == (4, 2, 0.5, 4)
    assert m.cached_prefix([5, 6, 7, 8, 9, 9]) == 4
    assert m.cached_prefix([5, 6, 0, 8]) == 2


def test_same_block_ids_after_another_parent_miss():
    m = BlockManager(block_size=2, num_blocks=8)
    a, b = BlockTable(), BlockTable()
    m.append(a, [1, 2, 3, 4])
    m.seal(a)
    m.append(b, [9, 9, 3, 4])  # block 2's ids equal a's, its parent does not
    m.seal(b)
    assert set(a.blocks).isdisjoint(b.blocks)
    assert m.num_hits == 0


def test_a_hit_is_confirmed_by_ids(monkeypatch):
    m = BlockManager(block_size=2, num_blocks=8)
    a, b = BlockTable(), BlockTable()
    monkeypatch.setattr("batchlab.engine.paths.paged.block_manager.block_hash",
                        lambda parent, ids: 7)  # every block collides
    m.append(a, [1, 2])
    m.seal(a)
    m.append(b, [3, 4])
    m.seal(b)
    assert (a.blocks, b.blocks, m.num_hits) == ([1], [2], 0)


def test_unknown_ids_are_never_hashed_and_stop_the_chain():
    m = BlockManager(block_size=2, num_blocks=8)
    t = BlockTable()
    m.append(t, [1, None, 3, 4])
    m.seal(t)
    assert (t.num_sealed, m.num_queries, m.blocks[2].hash) == (0, 0, None)


def test_right_padding_truncated_then_the_block_seals():
    m = BlockManager(block_size=2, num_blocks=8)
    t = BlockTable()
    m.append(t, [1, None, None])  # one id and two pad slots
    m.seal(t)
    m.truncate(t, 2)
    assert (t.blocks, t.num_tokens, t.ids) == ([1], 1, [1])
    assert list(m.free)[-1] == 2  # the pad's block went back
    m.append(t, [2])
    m.seal(t)
    assert (t.num_sealed, m.blocks[1].ids) == (1, (1, 2))


def test_a_write_into_a_partial_block_two_rows_read_is_refused():
    # no flow makes one (split_rows filters both sides of its fork before either writes;
    # shared prefix blocks are full): a refusal, not a silent write into another row
    m = BlockManager(block_size=4, num_blocks=8)
    a = BlockTable()
    m.append(a, [1, 2])
    b = m.fork(a)
    assert _refs(m)[1] == 2
    with pytest.raises(ValueError, match="block 1 is read by 2 rows"):
        m.append(b, [3])
    assert (b.blocks, b.num_tokens, _refs(m)[1]) == ([1], 2, 2)  # nothing changed
    m.release(b)
    assert m.append(a, [4]) == [6]  # a reads block 1 alone again


def test_writing_into_a_trimmed_cached_block_forgets_its_hash():
    m = BlockManager(block_size=2, num_blocks=8)
    t = BlockTable()
    m.append(t, [1, 2])
    m.seal(t)
    h = m.blocks[1].hash
    m.truncate(t, 1)
    assert m.append(t, [7]) == [3]
    assert (m.blocks[1].hash, h in m.hash_to_block) == (None, False)


def test_freed_cached_blocks_are_revived_then_reused_least_recent_first():
    m = BlockManager(block_size=2, num_blocks=3)
    a = BlockTable()
    m.append(a, [1, 2, 3, 4])
    m.seal(a)
    m.release(a)
    assert list(m.free) == [3, 2, 1]
    assert m.stats().num_cached == 2
    b = BlockTable()
    m.append(b, [1, 2, 3, 4])  # own blocks 3 and 2 taken first (least recently freed)
    m.seal(b)
    assert b.blocks == [1, 2]  # block 1 revived from the cache; 2 was its own, rehashed
    assert m.num_hits == 1
    c = BlockTable()
    m.append(c, [8, 8])  # block 3 (freed by b's hit) is the only free one
    assert c.blocks == [3]
    m.release(b)
    d = BlockTable()
    m.append(d, [9, 9])  # reuses b's tail block 2 first; its hash is dropped
    assert d.blocks == [2]
    assert m.cached_prefix([1, 2, 3, 4]) == 2
