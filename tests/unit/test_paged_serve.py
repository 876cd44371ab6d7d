"""Serving the paged path without HTTP: requests share a system prompt across time (the
prefix cache outlives the rows), the stats count blocks, and --kv-budget counts whole
blocks per row, unpadded."""

from __future__ import annotations

import queue

from batchlab.engine.core.sampler import GREEDY
from batchlab.engine.paths.paged.path import PagedScheduler
from batchlab.serve.budget import measure_row_cost
from batchlab.serve.engine_thread import Done, ServeEngine, Token
from batchlab.zoo import load

SYSTEM = [(7 * i) % 250 + 3 for i in range(40)]  # 2 full blocks of 16, then 8 ids


def _run(engine: ServeEngine, prompt: list[int], max_tokens: int) -> list[int]:
    events = queue.Queue()
    engine.submit({"prompt": prompt, "max_tokens": max_tokens, "sampling": GREEDY}, events.put)
    tokens = []
    while True:
        event = events.get(timeout=60)
        if isinstance(event, Token):
            tokens.append(event.id)
        elif isinstance(event, Done):
            return tokens


def test_a_later_request_finds_the_system_prompt_in_the_block_cache():
    model = load("llama-hd64").model
    engine = ServeEngine(model, scheduler_class=PagedScheduler, max_batch=4, vocab_size=256,
                         prompt_cache_size=0).start()
    try:
        first = _run(engine, SYSTEM + [1, 2], 4)
        _run(engine, SYSTEM + [9, 9, 9], 4)
        again = _run(engine, SYSTEM + [1, 2], 4)
        blocks = engine.stats().blocks
    finally:
        engine.close()
    assert first == again
    # the second and third requests each start on the two cached system blocks
    assert (blocks["prefill_ids_saved"], blocks["prefix_hits"]) == (64, 4)
    assert (blocks["blocks_used"], blocks["block_size"]) == (0, 16)
    assert blocks["blocks_cached"] >= 2


def test_the_kv_budget_counts_whole_blocks_per_row():
    model = load("llama-hd64").model  # 1024 bytes a token (2 layers, bf16, 2 heads of 64)
    cost = measure_row_cost(model, PagedScheduler)
    assert (cost.block_size, cost.per_token) == (16, 1024)
    assert cost.batch_bytes([1, 17, 40]) == (16 + 32 + 48) * 1024  # l1: 3 x 40 columns
    assert measure_row_cost(model).batch_bytes([1, 17, 40]) == 3 * 40 * 1024
