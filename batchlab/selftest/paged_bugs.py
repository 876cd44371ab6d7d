"""Seeded bugs in the paged path's block manager (``batchlab/engine/paths/paged/``).

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog. The block manager is bookkeeping: each bug leaves the arithmetic of
attention alone and puts a row's keys in, or reads them from, the wrong block.
"""

from __future__ import annotations

from batchlab.engine.paths.paged import block_manager
from batchlab.engine.paths.paged.block import NO_PARENT
from batchlab.engine.paths.paged.block_manager import BlockManager
from batchlab.selftest.inject import Patch, original, wrapped


def freed_block_still_in_table() -> list[Patch]:
    """``truncate`` (a prefill's right padding dropped, a row released) gives the
    dropped blocks back to the free list but leaves them in the row's table: the row's
    next block boundary writes into a block another row may now hold."""

    def truncate(self: BlockManager, table, n: int) -> None:
        if n <= 0:
            return
        keep = table.num_tokens - n
        num_keep = -(-keep // self.block_size)
        for block_id in reversed(table.blocks[num_keep:]):
            self._decref(block_id)
        del table.ids[keep:]
        table.num_tokens = keep
        table.num_sealed = min(table.num_sealed, keep // self.block_size)

    return [Patch(owner=BlockManager, name="truncate", value=truncate)]


def hash_without_parent() -> list[Patch]:
    """A block's hash covers its own ids but not its parent's hash: two rows whose block
    i holds the same ids after different earlier blocks share it (the ids check passes),
    so one row reads keys computed in another context."""
    clean = original(block_manager, "block_hash")
    return [Patch(owner=block_manager, name="block_hash",
                  value=lambda parent, ids: clean(NO_PARENT, ids))]


def block_boundary_off_by_one() -> list[Patch]:
    """The first token of each new block is written to slot 0 of the block before it
    (``blocks[(p - 1) // block_size]``): a row longer than one block overwrites its own
    first key of the previous block and leaves its new block's first slot empty."""

    def make(clean):
        def append(self: BlockManager, table, ids) -> list[int]:
            pos, bs = table.num_tokens, self.block_size
            out = clean(self, table, ids)
            return [table.blocks[(p - 1) // bs] * bs if p % bs == 0 and p > 0 else s
                    for p, s in zip(range(pos, pos + len(ids)), out)]

        return append

    return [wrapped(BlockManager, "append", make)]


def stale_hash_on_reuse() -> list[Patch]:
    """A freed block that still holds a cached prefix is handed out to a new row without
    dropping its hash: the new row overwrites it, and a later row whose prompt has that
    prefix finds the hash (and the old ids), so it reads the new row's keys."""

    def allocate(self: BlockManager) -> int:
        if not self.free:
            self._add_blocks(len(self.blocks) - 1)
        block_id, _ = self.free.popitem(last=False)
        self.blocks[block_id].ref_count = 1
        return block_id

    return [Patch(owner=BlockManager, name="_allocate", value=allocate)]
