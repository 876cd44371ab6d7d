"""The row-cost check: serve's projection of a batch's KV bytes against what it holds.

``serve --kv-budget`` admits a row only while ``RowCost.batch_bytes`` (engine/core/cost.py,
measured once on the path's own caches) of the rows it would run stays inside the
budget. A wrong projection lets serve overcommit memory, and no trajectory shows it, so
cells whose script is named ``row-cost...`` (``wants_row_cost_check``) run this check on
batchlab's engine after every step: the projection for the decode batch's live rows (each
at the ids its caches hold) must equal, as an int and byte for byte, what the batch's
caches hold for them, counted here from the arrays' shapes and dtypes, not from the
caches' own ``token_bytes`` / ``row_bytes``:

- full attention (``BatchKV``): rows x heads x the write index x head dims (left-padded to
  the longest row; the 256-column growth ahead of the write index is not counted);
- sliding window (``BatchRing``): the same up to the ring's width once it has rotated
  (a ring keeps the columns of rows that left: the projection is given the batch's ring
  width, ``cost.ring_width``, which serve reads from the engine's caches the same way);
- SSM / conv state (``BatchState``): every array, whatever the length;
- paged (``PagedKV``): each row's whole blocks in its own table.

A layer that reads another layer's keys holds none. Other caches (quantized, the
invariant path's windows) are refused with a message: the check knows only these.

On the paged path it also checks the prefix cache's side of the same accounting: every
row has offered each of its full blocks of known ids, in order, to the prefix cache
(``num_sealed`` counts exactly those), so a later row with the same prompt finds them;
and the pool statistics serve's metrics report (``BlockManager.stats``): the blocks in
use are exactly the distinct blocks the live rows' tables (prompt and decode batches)
hold, counted here from the tables, and the prefix cache never reports more hits than
queries. The queries themselves (``num_queries``, "full blocks sealed": the divisor of
serve's ``prefix_hit_rate``) are counted independently: every full block of known ids a
row offers (sealed in its prefill, or shared from the cache as it is admitted) is one
query, and a row's ``num_sealed`` counts exactly those; a row seals only while it
prefills, which ends a step, so every row is seen at its final count by some check, and
the sum over every row seen must be the manager's count.
"""

from __future__ import annotations

from batchlab.engine.caches.kv import BatchKV, LeftPaddedKV
from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.caches.state import BatchState
from batchlab.engine.core.cost import RowCost, measure_row_cost, ring_width
from batchlab.engine.core.layers import leaves
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.paged.cache import PagedKV

ROW_COST_SCRIPT = "row-cost"  # a cell's script name starting with it asks for the check


class RowCostMismatch(RuntimeError):
    """The projection and the bytes held differ: a FAIL of the cell, not a crash."""


def wants_row_cost_check(script: str) -> bool:
    return script.startswith(ROW_COST_SCRIPT)


def _kv_bytes(keys, values, width: int) -> int:
    """Bytes of ``width`` columns of (B, H, W, D) keys and values."""
    if keys is None:
        return 0
    return sum(a.shape[0] * a.shape[1] * width * a.shape[3] * a.dtype.size
               for a in (keys, values))


def held_bytes(cache) -> int:
    """What one layer's batch cache holds for its rows, from its arrays."""
    if isinstance(cache, PagedKV):  # before BatchKV: it is one
        pool = cache.pool
        if pool.keys is None:
            return 0
        per_slot = sum(a.size // a.shape[0] * a.dtype.size for a in (pool.keys, pool.values))
        return sum(len(t.blocks) for t in cache.rows) * pool.block_size * per_slot
    if isinstance(cache, BatchState):
        return sum(a.nbytes for a in cache.cache if a is not None)
    if type(cache) is BatchRing:
        if cache.keys is None:
            return 0
        width = cache.keys.shape[2] if cache.rotated else min(cache._idx, cache.keys.shape[2])
        return _kv_bytes(cache.keys, cache.values, width)
    if type(cache) is BatchKV:  # exactly: its subclasses (windows, quantized) differ
        return _kv_bytes(cache.keys, cache.values, cache._idx)
    kind = "quantized" if isinstance(cache, LeftPaddedKV) else "unknown"
    raise ValueError(f"the row-cost check cannot count a {type(cache).__name__} ({kind} "
                     "cache); give row-cost cells a path of l1, fast or paged caches")


def unsealed(cache: PagedKV) -> list[str]:
    """Rows of a paged layer whose sealed count is not the number of their leading full
    blocks of known ids (``BlockManager.seal`` stops at the first block with an unknown
    id: padding, decoded tokens)."""
    bs, out = cache.pool.block_size, []
    for i, t in enumerate(cache.rows):
        full = t.num_tokens // bs
        known = next((b for b in range(full) if None in t.ids[b * bs : (b + 1) * bs]), full)
        if t.num_sealed != known:
            out.append(f"row {i}: {t.num_sealed} sealed of {known} full known blocks")
    return out


def pool_mismatch(caches: list[PagedKV]) -> list[str]:
    """What ``stats()`` of each block manager gets wrong against the live tables."""
    by_manager: dict[int, tuple] = {}
    for c in caches:
        _, blocks = by_manager.setdefault(id(c.manager), (c.manager, set()))
        for t in c.rows:
            blocks.update(t.blocks)
    out = []
    for manager, blocks in by_manager.values():
        s = manager.stats()
        if s.num_used != len(blocks) or s.num_used + s.num_free != s.num_blocks:
            out.append(f"stats say {s.num_used} blocks used and {s.num_free} free of "
                       f"{s.num_blocks}; the live rows' tables hold {len(blocks)}")
        if not 0 <= s.num_hits <= s.num_queries:
            out.append(f"stats say {s.num_hits} prefix-cache hits of {s.num_queries} queries")
    return out


class QueryLedger:
    """The prefix-cache queries the rows made, counted from their tables: per block
    manager, each row's largest ``num_sealed`` seen (the row object is kept, so its id is
    not reused by a later row)."""

    def __init__(self):
        self.rows: dict[int, tuple[object, dict[int, tuple[object, int]]]] = {}

    def note(self, scheduler: Scheduler) -> None:
        for batch in (scheduler.prompt, scheduler.decode):
            for cache in leaves(batch.caches):
                if not isinstance(cache, PagedKV):
                    continue
                _, seen = self.rows.setdefault(id(cache.manager), (cache.manager, {}))
                for seq, table in zip(batch.seqs, cache.rows, strict=True):
                    before = seen.get(id(seq), (seq, 0))[1]
                    seen[id(seq)] = (seq, max(before, table.num_sealed))

    def mismatch(self) -> list[str]:
        out = []
        for manager, seen in self.rows.values():
            offered, counted = sum(n for _, n in seen.values()), manager.stats().num_queries
            if counted != offered:
                out.append(f"stats say {counted} prefix-cache queries; the {len(seen)} rows "
                           f"seen offered {offered} full blocks")
        return out


class RowCostCheck:
    """Measure the path's row cost once (on caches of its own, as serve does), then
    ``check(scheduler, step)`` after each step."""

    def __init__(self, model, scheduler_class: type[Scheduler]):
        self.cost: RowCost = measure_row_cost(model, scheduler_class(model).caches)
        self.queries = QueryLedger()
        self.checked = 0  # steps checked

    def check(self, scheduler: Scheduler, step: int) -> None:
        batch = scheduler.decode  # empty between rows: it must project and hold 0
        lengths = [len(s.cache_tokens()) for s in batch.seqs]
        # the rings' width is the batch's (a ring keeps the columns of rows that left):
        # serve reads it the same way, from the engine's caches
        projected = self.cost.batch_bytes(lengths, ring_width(batch.caches))
        held = sum(held_bytes(c) for c in leaves(batch.caches))
        if type(projected) is not int or projected != held:
            rows = ", ".join(f"{s.name}:{n}" for s, n in zip(batch.seqs, lengths))
            raise RowCostMismatch(
                f"after step {step} the decode batch's caches hold {held} bytes for rows "
                f"{rows} (ids held), but the row cost projects {projected!r} ({self.cost}): "
                "serve's --kv-budget admission reads that projection")
        paged = [c for c in leaves(batch.caches) if isinstance(c, PagedKV)]
        wrong = [w for c in paged for w in unsealed(c)]
        if wrong:
            raise RowCostMismatch(f"after step {step} the prefix cache misses full blocks of "
                                  f"the decode batch ({'; '.join(wrong)}): later rows with "
                                  "the same prompt recompute them")
        live = paged + [c for c in leaves(scheduler.prompt.caches) if isinstance(c, PagedKV)]
        self.queries.note(scheduler)
        # every layer's manager counts the same rows: one line per distinct complaint
        wrong = list(dict.fromkeys((pool_mismatch(live) if live else []) + self.queries.mismatch()))
        if wrong:
            raise RowCostMismatch(f"after step {step} the KV pool's statistics are wrong "
                                  f"({'; '.join(wrong)}): serve's metrics report them")
        self.checked += 1
