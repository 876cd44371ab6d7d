"""The block manager: one layer's pool of KV blocks, its free list and its prefix cache.

    append(table, ids)   slots for len(ids) new tokens (allocating blocks as the row
                         grows; a write into a partial block another row reads is refused)
    seal(table)          hash the row's newly full blocks; a block whose hash and ids
                         are cached already is swapped for the cached one (a prefix hit)
    truncate(table, n)   drop the row's last n tokens (a prefill's right padding, trim)
    release(table)       the row is gone: every block loses a reference
    fork(table)          a second table over the same blocks (each gains a reference)

Block 0 is never handed out: it stays zero and pads every gathered row's left columns.
A freed block keeps its hash until it is handed out again, so a later row with the same
prefix revives it; free blocks are handed out least recently freed first, and a row's
blocks are freed last-block-first, so its prefix stays cached longest (nano-vllm's order).
``num_blocks=None`` grows the pool (doubling) instead of raising ``OutOfBlocks``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from batchlab.engine.paths.paged.block import NO_PARENT, Block, block_hash
from batchlab.engine.paths.paged.table import BlockTable

ZERO_BLOCK = 0
DEFAULT_BLOCK_SIZE = 16


class OutOfBlocks(RuntimeError):
    """The pool has no free block left (a fixed ``num_blocks``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockStats:
    num_blocks: int  # handed-out-able blocks (the zero block not counted)
    num_used: int  # blocks some row references
    num_free: int
    num_cached: int  # free blocks that still hold a hashed prefix (revivable)
    num_queries: int  # full blocks sealed
    num_hits: int  # of which found in the prefix cache

    @property
    def hit_rate(self) -> float:
        return self.num_hits / self.num_queries if self.num_queries else 0.0


class BlockManager:
    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE, num_blocks: int | None = None,
                 initial_blocks: int = 16):
        if block_size < 1:  # not gated: input
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if num_blocks is not None and num_blocks < 1:  # not gated: input
            raise ValueError(f"num_blocks must be >= 1 (or None to grow), got {num_blocks}")
        self.block_size = block_size
        self.growable = num_blocks is None
        self.blocks: list[Block] = [Block(ZERO_BLOCK)]
        self.free: OrderedDict[int, None] = OrderedDict()  # oldest freed first
        self.hash_to_block: dict[int, int] = {}
        self.num_queries = 0
        self.num_hits = 0
        self._add_blocks(initial_blocks if num_blocks is None else num_blocks)

    @property
    def capacity(self) -> int:
        """Blocks the pool arrays must hold, the zero block included."""
        return len(self.blocks)

    def _add_blocks(self, n: int) -> None:
        start = len(self.blocks)
        self.blocks += [Block(i) for i in range(start, start + n)]
        for i in range(start, start + n):
            self.free[i] = None

    def _allocate(self) -> int:
        if not self.free:
            if not self.growable:  # one way: bench only
                raise OutOfBlocks(f"all {len(self.blocks) - 1} KV blocks are in use; "
                                  "admit fewer rows or give the pool more blocks")
            self._add_blocks(len(self.blocks) - 1)
        block_id, _ = self.free.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None:  # a cached prefix evicted: it is rewritten now
            self._forget(block)
        block.ref_count = 1
        return block_id

    def _forget(self, block: Block) -> None:
        if self.hash_to_block.get(block.hash) == block.id:
            del self.hash_to_block[block.hash]
        block.hash, block.ids = None, ()

    def _decref(self, block_id: int) -> None:
        block = self.blocks[block_id]
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free[block_id] = None

    def _incref(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:  # a cached free block revived
            del self.free[block_id]
        block.ref_count += 1

    # -- rows ----------------------------------------------------------------------------

    def append(self, table: BlockTable, ids: Sequence[int | None]) -> list[int]:
        """The pool row (slot) of each of ``len(ids)`` new tokens, in order."""
        bs = self.block_size
        pos = table.num_tokens
        if pos % bs and ids:
            last = self.blocks[table.blocks[-1]]
            # No flow writes into a partial block another row reads, so there is no
            # copy-on-write: ``fork``'s one caller (split_rows' twin) filters both sides
            # before either writes, and shared blocks (prefix hits) are full.
            if last.ref_count > 1:  # not gated: misuse
                raise ValueError(f"block {last.id} is read by {last.ref_count} rows; a row "
                                 "cannot write into it (release or filter the fork first)")
            # trimmed into (a hashed block is partial only after trim): its content changes
            if last.hash is not None:  # one way: protocol
                self._forget(last)
        slots = []
        for p in range(pos, pos + len(ids)):
            if p % bs == 0:
                table.blocks.append(self._allocate())
            slots.append(table.blocks[p // bs] * bs + p % bs)
        table.num_tokens += len(ids)
        table.ids.extend(ids)
        return slots

    def seal(self, table: BlockTable) -> None:
        """Hash every newly full block of known ids, in order; take the cached block on a
        hit (same chained hash, same ids) and free the row's own copy."""
        bs = self.block_size
        for i in range(table.num_sealed, table.num_tokens // bs):
            ids = tuple(table.ids[i * bs : (i + 1) * bs])
            if None in ids:
                return
            parent = NO_PARENT if i == 0 else self.blocks[table.blocks[i - 1]].hash
            h = block_hash(parent, ids)
            self.num_queries += 1
            own = self.blocks[table.blocks[i]]
            cached = self.hash_to_block.get(h)
            if cached is not None and cached != own.id and self.blocks[cached].ids == ids:
                self.num_hits += 1
                self._incref(cached)
                self._decref(own.id)
                table.blocks[i] = cached
            elif own.hash is None:
                own.hash, own.ids = h, ids
                self.hash_to_block[h] = own.id
            table.num_sealed = i + 1

    def truncate(self, table: BlockTable, n: int) -> None:
        keep = table.num_tokens - n
        if n <= 0:
            return
        if keep < 0:  # not gated: misuse
            raise ValueError(f"cannot drop {n} tokens of a row holding {table.num_tokens}")
        num_keep = -(-keep // self.block_size)
        for block_id in reversed(table.blocks[num_keep:]):
            self._decref(block_id)
        del table.blocks[num_keep:]
        del table.ids[keep:]
        table.num_tokens = keep
        table.num_sealed = min(table.num_sealed, keep // self.block_size)

    def release(self, table: BlockTable) -> None:
        self.truncate(table, table.num_tokens)

    def fork(self, table: BlockTable) -> BlockTable:
        for block_id in table.blocks:
            self._incref(block_id)
        return BlockTable(blocks=list(table.blocks), num_tokens=table.num_tokens,
                          ids=list(table.ids), num_sealed=table.num_sealed)

    def share_prefix(self, table: BlockTable, ids: Sequence[int]) -> None:
        """Start an empty ``table`` on the cached blocks of ``ids`` (whole blocks, each a
        hit, each gaining a reference): a row whose prompt begins with a cached prefix.
        Raises if ``ids`` is not cached whole (ask ``cached_prefix`` first)."""
        bs, parent = self.block_size, NO_PARENT
        if table.num_tokens or len(ids) % bs:  # not gated: misuse
            raise ValueError("share_prefix needs an empty table and whole blocks of ids")
        for start in range(0, len(ids), bs):
            block_ids = tuple(ids[start : start + bs])
            parent = block_hash(parent, block_ids)
            cached = self.hash_to_block.get(parent)
            if cached is None or self.blocks[cached].ids != block_ids:  # not gated: misuse
                raise ValueError(f"ids {start}..{start + bs - 1} are not in the prefix cache")
            self._incref(cached)
            self.num_queries += 1
            self.num_hits += 1
            table.blocks.append(cached)
        table.ids.extend(ids)
        table.num_tokens = table.num_sealed = len(ids)
        table.num_sealed //= bs

    def cached_prefix(self, ids: Sequence[int]) -> int:
        """How many leading tokens of ``ids`` the prefix cache holds (full blocks only):
        what a new row with this prompt would find. Counts nothing."""
        bs, parent, n = self.block_size, NO_PARENT, 0
        while n + bs <= len(ids):
            block_ids = tuple(ids[n : n + bs])
            h = block_hash(parent, block_ids)
            cached = self.hash_to_block.get(h)
            if cached is None or self.blocks[cached].ids != block_ids:
                break
            parent, n = h, n + bs
        return n

    def stats(self) -> BlockStats:
        num_blocks = len(self.blocks) - 1
        cached = sum(1 for b in self.free if self.blocks[b].hash is not None)
        return BlockStats(num_blocks=num_blocks, num_used=num_blocks - len(self.free),
                          num_free=len(self.free), num_cached=cached,
                          num_queries=self.num_queries, num_hits=self.num_hits)
