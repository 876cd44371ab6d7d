"""``/metrics`` in Prometheus's text format, through prometheus-client.

One registry per server (tests run several servers in one process). The engine's
gauges are read from its stats snapshot at scrape time; TTFT and inter-token latency
are observed by the request handlers as tokens reach them.
"""

from __future__ import annotations

import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from batchlab.serve.paged_stats import BlockGauges

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ServeMetrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.running = Gauge("batchlab_running_rows", "rows in the scheduler", registry=r)
        self.decoding = Gauge("batchlab_decoding_rows", "rows in the decode batch", registry=r)
        self.waiting = Gauge("batchlab_waiting_rows", "rows waiting for admission", registry=r)
        self.waiting_tokens = Gauge("batchlab_waiting_prompt_tokens",
                                    "prompt tokens of the rows waiting for admission",
                                    registry=r)
        self.prefilling = Gauge("batchlab_prefilling_rows",
                                "rows in the scheduler with prompt still to prefill", registry=r)
        self.prefill_left = Gauge("batchlab_prefill_tokens_left",
                                  "prompt tokens the admitted rows have still to prefill",
                                  registry=r)
        self.kv_bytes = Gauge("batchlab_projected_kv_bytes",
                              "projected KV bytes of the admitted rows", registry=r)
        self.tokens = Counter("batchlab_generated_tokens", "tokens generated", registry=r)
        self.tokens_per_s = Gauge("batchlab_tokens_per_second",
                                  "tokens generated per second since the last scrape",
                                  registry=r)
        self.crashes = Gauge("batchlab_engine_crashes", "engine steps that failed", registry=r)
        self.row_faults = Gauge("batchlab_row_faults",
                                "faults contained to one row or its prompt-cache entry",
                                registry=r)
        self.cache_entries = Gauge("batchlab_prompt_cache_entries",
                                   "finished requests' caches kept for reuse", registry=r)
        self.cache_bytes = Gauge("batchlab_prompt_cache_bytes",
                                 "bytes the prompt cache holds (apart from the batch's KV)",
                                 registry=r)
        self.cache_hits = Counter("batchlab_prompt_cache_hits",
                                  "requests that joined with a cached prefix", registry=r)
        self.cache_misses = Counter("batchlab_prompt_cache_misses",
                                    "requests that found no cached prefix", registry=r)
        self.prompt_tokens = Counter("batchlab_prompt_tokens", "prompt tokens admitted",
                                     registry=r)
        self.prefilled = Counter("batchlab_prefilled_tokens", "prompt tokens prefilled",
                                 registry=r)
        self.cached_prompt_tokens = Counter("batchlab_cached_prompt_tokens",
                                            "prompt tokens a cache hit did not prefill",
                                            registry=r)
        self.ttft = Histogram("batchlab_time_to_first_token_seconds",
                              "request start to its first token", buckets=LATENCY_BUCKETS,
                              registry=r)
        self.itl = Histogram("batchlab_inter_token_latency_seconds",
                             "gap between a choice's tokens", buckets=LATENCY_BUCKETS,
                             registry=r)
        self.blocks = BlockGauges(r)  # the paged path's; zero on other paths
        self._last = (time.monotonic(), 0)
        self._counted: dict[str, int] = {}  # each counter's engine total at the last scrape

    def render(self, engine) -> tuple[bytes, str]:
        s = engine.stats()
        self.running.set(s.running)
        self.decoding.set(s.decoding)
        self.waiting.set(s.waiting)
        self.waiting_tokens.set(s.waiting_prompt_tokens)
        self.prefilling.set(s.prefilling)
        self.prefill_left.set(s.prefill_tokens_left)
        self.row_faults.set(s.row_faults)
        self.kv_bytes.set(s.projected_kv_bytes)
        self.crashes.set(s.crashes)
        self.cache_entries.set(s.prompt_cache_entries)
        self.cache_bytes.set(s.prompt_cache_bytes)
        self.blocks.update(s.blocks)
        for name, counter, total in (
                ("hits", self.cache_hits, s.prompt_cache_hits),
                ("misses", self.cache_misses, s.prompt_cache_misses),
                ("prompt", self.prompt_tokens, s.prompt_tokens),
                ("cached", self.cached_prompt_tokens, s.cached_prompt_tokens),
                ("prefilled", self.prefilled, s.prefilled_tokens)):
            counter.inc(total - self._counted.get(name, 0))  # counters take increments
            self._counted[name] = total
        now = time.monotonic()
        then, tokens = self._last
        self.tokens.inc(s.tokens_generated - tokens)
        self.tokens_per_s.set((s.tokens_generated - tokens) / max(now - then, 1e-9))
        self._last = (now, s.tokens_generated)
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
