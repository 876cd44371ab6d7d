"""``EngineStats``: the engine thread's state, as ``/stats`` and ``/metrics`` show it.

The thread publishes one after admitting and one after stepping, so a long step shows
what it is working on: the rows it is prefilling and the tokens they have left, and the
jobs still queued behind them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineStats:
    running: int  # jobs in the scheduler (prefilling or decoding), never over max_batch
    decoding: int  # rows in the scheduler's decode batch
    prefilling: int  # rows in the scheduler with prompt still to prefill
    prefill_tokens_left: int  # the prompt tokens those rows have still to prefill
    waiting: int  # jobs queued: held back by max_batch or the KV budget
    waiting_prompt_tokens: int  # their prompt tokens
    max_batch: int
    peak_decoding: int  # the largest decode batch so far (batching is visible here)
    projected_kv_bytes: int
    kv_budget: int | None
    prefill_budget: int  # prompt tokens a step may prefill (--prefill-step-size)
    tokens_generated: int
    prefilled_tokens: int  # prompt tokens prefilled so far (a cache hit's are not)
    steps: int
    crashes: int  # steps that raised (every row in them failed)
    row_faults: int  # faults contained to one row or its prompt-cache entry
    prompt_tokens: int  # of every admitted job, cached or not
    cached_prompt_tokens: int  # of those, the ones a prompt-cache hit did not prefill
    prompt_cache_hits: int
    prompt_cache_misses: int
    prompt_cache_entries: int
    prompt_cache_bytes: int  # held apart from the batch: not in projected_kv_bytes
    prompt_cache_max_entries: int
    prompt_cache_max_bytes: int | None
    blocks: dict | None = None  # the paged path's block counts (serve/paged_stats.py)
