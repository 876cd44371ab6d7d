"""The paged path's block counts in ``/stats`` and ``/metrics`` (issue 27).

``block_stats(scheduler)`` reads the scheduler's ``PagedCaches`` (None on other paths):
blocks used / free / cached (free, still holding a hashed prefix that a request can
revive), the prefix cache's hit rate over full prompt blocks, and the prompt ids whose
prefill a cached prefix spared. The counts are one full-attention layer's; every such
layer holds the same rows in the same number of blocks.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

FIELDS = {
    "blocks_used": "KV blocks some row holds (one layer's)",
    "blocks_free": "KV blocks free (one layer's)",
    "blocks_cached": "free KV blocks that still hold a cached prefix",
    "prefix_hit_rate": "full prompt blocks found in the prefix cache / blocks looked up",
    "prefill_ids_saved": "prompt ids a cached prefix spared from prefill",
}


def block_stats(scheduler) -> dict | None:
    caches = getattr(scheduler, "caches", None)
    stats = caches.stats() if hasattr(caches, "stats") else None
    if stats is None:
        return None
    return {"blocks_used": stats.num_used, "blocks_free": stats.num_free,
            "blocks_cached": stats.num_cached, "prefix_hit_rate": stats.hit_rate,
            "prefix_hits": stats.num_hits, "prefix_queries": stats.num_queries,
            "prefill_ids_saved": getattr(scheduler, "num_prefill_saved", 0),
            "block_size": caches.block_size}


class BlockGauges:
    def __init__(self, registry: CollectorRegistry):
        self.gauges = {name: Gauge(f"batchlab_paged_{name}", text, registry=registry)
                       for name, text in FIELDS.items()}

    def update(self, blocks: dict | None) -> None:
        for name, gauge in self.gauges.items():
            gauge.set(blocks[name] if blocks else 0)
