"""A row's block table: which pool blocks hold its tokens, in order, and their ids.

Token p of the row (p counted from the row's first real token: no left padding is
stored) sits in block ``blocks[p // block_size]`` at slot ``p % block_size``. A row of 37
tokens at block size 16 holds 3 blocks, the last one 5/16 full.

``ids`` are the token ids written so far, ``None`` where the writer did not know them (a
decode step's fed token is still on the device; a prefill's right padding); only a full
block whose ids are all known is hashed (``BlockManager.seal``), and hashing stops at the
first block that is not, so the chain of hashes always starts at the row's first block.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, kw_only=True)  # not frozen: it grows with its row
class BlockTable:
    blocks: list[int] = field(default_factory=list)
    num_tokens: int = 0
    ids: list[int | None] = field(default_factory=list)
    num_sealed: int = 0  # leading blocks already hashed (or found in the prefix cache)

    def num_blocks_for(self, block_size: int) -> int:
        return -(-self.num_tokens // block_size)
