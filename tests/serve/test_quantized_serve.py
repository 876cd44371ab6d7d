"""``serve --kv-bits 8`` with the prompt cache on (issue 29): a finished row's quantized
caches are kept and counted (keys and values are each a tuple of packed, scales and
biases arrays: counting them crashed every finished request's step before), and a
second turn that hits the cache answers as a fresh server does.

llama-hd64: the zoo llama with head_dim 64, which 8-bit groups of 64 divide (the plain
zoo llama's 16 does not). The path is ``kv8``: quantized from the first token
(``--quantized-kv-start 0``), so short prompts exercise it.
"""

from __future__ import annotations

import threading

import httpx2
from serve_live import client, live_server

from batchlab.engine.paths.registry import kv_path_for

MODEL = "llama-hd64"
PATH = kv_path_for(8, 64, 0)
PROMPT = [5, 6, 7, 8, 9, 10, 11]
NO_STOP = {"stop_token_ids": []}
LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 64


def _ask(server, prompt, max_tokens=6):
    reply = client(server).completions.create(model=MODEL, prompt=prompt,
                                              max_tokens=max_tokens, extra_body=NO_STOP)
    return reply.choices[0].token_ids, reply.usage.prompt_tokens_details.cached_tokens


def test_a_finished_quantized_row_is_kept_and_every_array_counted():
    with live_server(MODEL, path=PATH, max_batch=4) as server:
        tokens, _ = _ask(server, PROMPT)
        stats = httpx2.get(server.url + "/stats").json()
        health = httpx2.get(server.url + "/health").json()
    held = len(PROMPT) + len(tokens)  # the prompt and every emitted token (each was fed)
    # per layer, keys and values: 8-bit packed (one byte a value), and one bf16 scale and
    # one bf16 bias per group of 64 values
    per_token = LAYERS * 2 * KV_HEADS * (HEAD_DIM + 2 * 2 * HEAD_DIM // 64)
    assert (stats["crashes"], stats["row_faults"], health["status"]) == (0, 0, "ok")
    assert stats["prompt_cache_entries"] == 1
    assert stats["prompt_cache_bytes"] == per_token * held


def test_a_second_turn_from_the_cache_answers_as_a_fresh_server_and_joins_cleanly():
    with live_server(MODEL, path=PATH, max_batch=4, prompt_cache_size=0) as fresh:
        first, _ = _ask(fresh, PROMPT)
        turn2 = PROMPT + first + [12, 13]
        want, _ = _ask(fresh, turn2)
        other = [40, 41, 42]
        want_other, _ = _ask(fresh, other)
    with live_server(MODEL, path=PATH, max_batch=4) as server:
        assert _ask(server, PROMPT)[0] == first
        out = {}
        # a fresh row joins the batch beside the cache-hit row
        threads = [threading.Thread(target=lambda: out.update(hit=_ask(server, turn2))),
                   threading.Thread(target=lambda: out.update(other=_ask(server, other)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        stats = httpx2.get(server.url + "/stats").json()
    assert stats["crashes"] == 0
    assert out["hit"] == (want, len(PROMPT) + len(first))
    assert out["other"] == (want_other, 0)
