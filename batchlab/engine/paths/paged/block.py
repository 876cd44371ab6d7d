"""One KV block of a paged pool, and the chained hash that names a full one.

A block is an id, a reference count, and, once full of known ids, a hash and those ids
(nano-vllm's ``Block``). The hash of block i of a row chains the hash of block i-1, so two
rows share block i only if they agree on every id before it too::

    h0 = block_hash(-1, ids[0:16])     # the first block has no parent
    h1 = block_hash(h0, ids[16:32])

A hit on a hash is confirmed by comparing ids (a 64-bit hash can collide).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

NO_PARENT = -1  # the parent hash of a row's first block


def block_hash(parent: int, ids: Sequence[int]) -> int:
    """A 63-bit hash of ``parent`` (the previous block's hash, or NO_PARENT) and ``ids``;
    the same on every run and machine (xxhash-free: sha256 of the int64 bytes)."""
    h = hashlib.sha256(np.int64(parent).tobytes())
    h.update(np.asarray(ids, dtype=np.int64).tobytes())
    return int.from_bytes(h.digest()[:8], "little") >> 1


class Block:
    """A block's bookkeeping; its keys and values live in the layer's pool at rows
    ``id * block_size ... id * block_size + block_size - 1``."""

    __slots__ = ("id", "ref_count", "hash", "ids")

    def __init__(self, block_id: int):
        self.id = block_id
        self.ref_count = 0
        self.hash: int | None = None  # set once the block is full of known ids
        self.ids: tuple[int, ...] = ()  # the ids it was hashed with (to confirm a hit)

    def __repr__(self) -> str:
        return f"Block({self.id}, ref={self.ref_count}, hash={self.hash})"
