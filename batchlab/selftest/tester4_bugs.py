"""Seeded bugs of the outside tester's fourth round (reports/gate/outside-tester-r4/): the
two bugs of its 26 that every default cell passed. Both live where no trajectory shows
them, in the accounting serve admits and reports by, so only the row-cost check of a
``row-cost`` cell sees them; and each sat in a regime that check had not been run in:
multi-head latent attention (keys and values of two widths) and a prefix-cache hit found
by a seal (rows prefilled together with one prefix) rather than at admission.

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog (``catalog_rounds.py`` names the cells that catch it). They wrap the engine's own
code where they can, so they keep tracking it as it changes.
"""

from __future__ import annotations

from batchlab.engine.caches.kv import LeftPaddedKV
from batchlab.engine.paths.paged.block_manager import BlockManager
from batchlab.selftest.inject import Patch, original


def row_cost_latent_keys_twice() -> list[Patch]:
    """A KV cache's bytes per token counted as twice its keys' bytes ("keys and values are
    alike"), not keys plus values. Exact wherever both have one width; multi-head latent
    attention caches a 32-wide latent as keys and the 8-wide RoPE key part as values, so
    serve's row cost (``--kv-budget``) over-counts deepseek-v3 and kimi-linear rows."""

    def token_bytes(self: LeftPaddedKV) -> int:
        if self.keys is None:
            return 0
        return 2 * self.keys.nbytes // (self.keys.shape[0] * self.keys.shape[2])

    original(LeftPaddedKV, "token_bytes")  # refuse if the engine moved it
    return [Patch(owner=LeftPaddedKV, name="token_bytes", value=token_bytes)]


def seal_hit_keeps_own_block() -> list[Patch]:
    """A full block that the prefix cache already holds, found when the row seals it
    (rows prefilled together with one prefix), is shared, but the row's own copy is never
    given back: the pool leaks a block per hit, serve's pool statistics count it as used
    and a fixed pool runs out early. No token changes (the shared block holds the same
    keys), so only the row-cost check's pool count sees it."""
    clean = original(BlockManager, "seal")

    def seal(self: BlockManager, table) -> None:
        self._decref = lambda block_id: None  # the row's own copy keeps its reference
        try:
            clean(self, table)
        finally:
            del self._decref  # the instance attribute; the method shows again

    return [Patch(owner=BlockManager, name="seal", value=seal)]
