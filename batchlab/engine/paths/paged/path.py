"""The paged path's scheduler: l1's schedule over ``PagedCaches``, with a prefix cache.

Prompt ids go to the caches before each prefill forward, so full prompt blocks are
hashed and a block another row holds already is stored once (``cache.py``). On models
whose every layer is full attention, a queued row whose prompt starts with cached blocks
also skips their prefill: it is admitted holding those blocks (as a row with history is)
and prefills only the rest, unless that would change the schedule (fewer prefill chunks,
or nothing left to prefill: the row would join a step early), so the path stays on the
batch oracle's schedule and is judged against its goldens, bit for bit.
"""

from __future__ import annotations

from mlx import nn

from batchlab.engine.core.config import MLX_LM_DEFAULTS, ScheduleConfig
from batchlab.engine.core.layers import leaves
from batchlab.engine.core.sampler import GREEDY, SamplingParams
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.paged.block_manager import DEFAULT_BLOCK_SIZE
from batchlab.engine.paths.paged.cache import PagedKV
from batchlab.engine.paths.paged.caches import PagedCaches


class PagedScheduler(Scheduler):
    caches: PagedCaches = PagedCaches()  # replaced per instance: each scheduler owns its pools
    block_size: int = DEFAULT_BLOCK_SIZE
    num_blocks: int | None = None
    share_prefixes: bool = True  # False: no ids reach the caches, nothing is hashed
    skip_cached_prefill: bool = True

    def __init__(self, model: nn.Module, config: ScheduleConfig = MLX_LM_DEFAULTS,
                 sampling: SamplingParams = GREEDY, row_sampler: type | None = None):
        super().__init__(model, config, sampling, row_sampler)
        self.caches = PagedCaches(block_size=self.block_size, num_blocks=self.num_blocks)
        self.num_prefill_saved = 0  # prompt ids whose prefill a cached prefix spared
        self._all_paged: bool | None = None

    def _cached_ids(self, seq) -> int:
        """How many leading prompt ids of ``seq`` to take from the prefix cache."""
        # history rows never get here (_admitted_caches); sharing is off in bench only
        sharing = self.skip_cached_prefill and self.share_prefixes
        if not sharing or seq.request.history:  # one way: bench only
            return 0
        if not self.caches.pools:
            return 0
        if self._all_paged is None:
            self._all_paged = all(isinstance(c, PagedKV)
                                  for c in leaves(self.caches.fresh(self.model, 1)))
        if not self._all_paged:
            return 0
        ids = seq.unprefilled
        bs, step = self.caches.block_size, self.config.prefill_step_size
        k = min(self.caches.pools[0].manager.cached_prefix(ids), (len(ids) - 1) // bs * bs)
        if k <= 0 or -(-(len(ids) - k) // step) != -(-len(ids) // step):
            return 0  # nothing cached, or the row would prefill in fewer chunks
        return k

    def _admitted_caches(self, seqs: list) -> list:
        """l1's caches for the admitted rows; rows without history may start on cached
        prompt blocks (their prefill skips those ids)."""
        cached = [0 if s.request.history else self._cached_ids(s) for s in seqs]
        if any(s.request.history for s in seqs) or not any(cached):
            return super()._admitted_caches(seqs)
        prefixes = [s.unprefilled[:k] for s, k in zip(seqs, cached)]
        caches = self.caches.fresh_with_prefix(self.model, prefixes)
        for s, k in zip(seqs, cached):
            s.unprefilled = s.unprefilled[k:]
            self.num_prefill_saved += k
        return caches

    def _prefill_chunk(self) -> None:
        """Tell the caches which ids the chunk writes (right padding unknown), as l1's
        ``_prefill_chunk`` will cut it."""
        if len(self.prompt) and self.share_prefixes:
            step = self.config.prefill_step_size
            chunks = [s.unprefilled[: min(len(s.unprefilled), step)] for s in self.prompt.seqs]
            width = max(len(c) for c in chunks)
            ids = tuple(list(c) + [None] * (width - len(c)) for c in chunks)
            for cache in leaves(self.prompt.caches):
                if isinstance(cache, PagedKV):
                    cache.pending_ids = ids
        super()._prefill_chunk()
