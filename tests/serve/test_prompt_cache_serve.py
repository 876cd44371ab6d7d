"""The prompt cache in the server: a request that joins with a cached prefix answers with
the same tokens and logprobs as the same request on a fresh server without a prompt
cache (CPU, models without sliding windows), prefills only the rest, and says so in
/stats, /metrics and ``usage.prompt_tokens_details.cached_tokens``."""

from __future__ import annotations

import queue

import httpx2
import pytest
from serve_live import client, live_server

from batchlab.engine.core.sampler import GREEDY as SAMPLING_GREEDY
from batchlab.serve.job import Done, Token
from batchlab.zoo.chat import chat_prompt

REAL = "smollm2-135m"
PROMPT = [3, 14, 15, 92, 65, 35, 89, 79]
GREEDY = {"max_tokens": 6, "logprobs": 3, "stop_token_ids": [], "temperature": 0}


@pytest.fixture(scope="module")
def servers():
    with live_server(max_batch=4) as cached, live_server(max_batch=4,
                                                         prompt_cache_size=0) as fresh:
        yield cached, fresh


def _complete(server, prompt: list[int], **fields) -> dict:
    r = httpx2.post(server.url + "/v1/completions",
                    json={"prompt": prompt, **GREEDY, **fields}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _answer(body: dict) -> tuple:
    """Everything a client sees of the tokens: ids, their logprobs and the top 3."""
    choice = body["choices"][0]
    lp = choice["logprobs"]
    return choice["token_ids"], lp["token_logprobs"], lp["top_logprobs"]


def _stats(server) -> dict:
    return httpx2.get(server.url + "/stats").json()


def test_a_cached_prefix_gives_the_fresh_servers_tokens_and_logprobs(servers):
    cached, fresh = servers
    first = _complete(cached, PROMPT)
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    emitted = first["choices"][0]["token_ids"]
    before = _stats(cached)
    # the entry holds PROMPT + the 6 emitted ids (each fed by the forward that emitted it)
    cases = [("extends the entry", PROMPT + emitted + [26, 53, 58], len(PROMPT) + 6),
             ("diverges inside it: trimmed", PROMPT[:5] + [7, 7, 7], 5),
             ("equals its prompt: one token left to feed", PROMPT, len(PROMPT) - 1)]
    for why, prompt, reused in cases:
        hit, miss = _complete(cached, prompt), _complete(fresh, prompt)
        assert _answer(hit) == _answer(miss), why
        assert hit["usage"]["prompt_tokens_details"] == {"cached_tokens": reused}, why
        assert miss["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}, why
    after = _stats(cached)
    reused = len(PROMPT) + 6 + 5 + len(PROMPT) - 1
    assert after["prompt_cache_hits"] - before["prompt_cache_hits"] == 3
    assert after["cached_prompt_tokens"] - before["cached_prompt_tokens"] == reused
    prompts = sum(len(p) for _, p, _ in cases)
    assert after["prompt_tokens"] - before["prompt_tokens"] == prompts
    # the fresh server prefilled every token of the same prompts
    assert _stats(fresh)["cached_prompt_tokens"] == _stats(fresh)["prompt_cache_hits"] == 0
    assert 0 < after["prompt_cache_entries"] <= 10 and after["prompt_cache_bytes"] > 0


def test_a_hit_with_penalties_sees_the_cached_ids_as_context(servers):
    cached, fresh = servers
    penalties = {"repetition_penalty": 1.3, "frequency_penalty": 0.5, "max_tokens": 8}
    prompt = [40, 41, 40, 42, 40]
    emitted = _complete(cached, prompt, **penalties)["choices"][0]["token_ids"]
    longer = [*prompt, *emitted, 43]
    hit, miss = _complete(cached, longer, **penalties), _complete(fresh, longer, **penalties)
    assert hit["usage"]["prompt_tokens_details"] == {"cached_tokens": len(prompt) + 8}
    assert _answer(hit) == _answer(miss)


def test_a_stop_string_keeps_the_rows_cache_a_cancel_does_not(servers):
    cached, fresh = servers
    prompt = [120, 121, 122, 123]
    whole = _complete(fresh, prompt, max_tokens=12)["choices"][0]
    text, ids = whole["text"], whole["token_ids"]
    stop = next(text[i:i + 2] for i in range(2, len(text) - 1)
                if text[i:i + 2].isprintable() and text.find(text[i:i + 2]) == i)
    stopped = _complete(cached, prompt, max_tokens=12, stop=[stop])["choices"][0]
    assert stopped["finish_reason"] == "stop"
    # the stop string cancels the row with keep_cache, queued before the next request
    other = next(t for t in (7, 8) if t != ids[1])  # diverges after the first emitted id
    follow = _complete(cached, [*prompt, ids[0], other])
    assert follow["usage"]["prompt_tokens_details"] == {"cached_tokens": len(prompt) + 1}

    events = queue.Queue()  # a cancelled row (a client that left) keeps nothing
    job = cached.engine.submit({"prompt": [130, 131, 132], "max_tokens": 4000,
                                "sampling": SAMPLING_GREEDY, "stop_ids": frozenset()},
                               events.put)
    first = events.get(timeout=30)
    assert isinstance(first, Token)
    cached.engine.cancel(job)
    while not isinstance(done := events.get(timeout=30), Done):
        pass
    assert done.reason == "cancelled"
    other = next(t for t in (7, 8) if t != first.id)  # kept, it would serve 3 ids
    assert _complete(cached, [130, 131, 132, other])["usage"]["prompt_tokens_details"] == \
        {"cached_tokens": 0}


def test_metrics_count_hits_and_cached_tokens(servers):
    cached, _ = servers
    _complete(cached, [200, 201, 202, 203])
    _complete(cached, [200, 201, 202, 203, 204])
    stats = _stats(cached)
    text = httpx2.get(cached.url + "/metrics").text
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if line[:1] != "#")
    assert float(lines["batchlab_prompt_cache_hits_total"]) == stats["prompt_cache_hits"] > 0
    assert float(lines["batchlab_cached_prompt_tokens_total"]) == \
        stats["cached_prompt_tokens"] > 0
    assert float(lines["batchlab_prompt_cache_bytes"]) == stats["prompt_cache_bytes"] > 0


def test_the_byte_cap_and_the_entry_count_hold_on_the_server():
    with live_server(max_batch=2, prompt_cache_size=2) as server:
        for start in (10, 20, 30):
            _complete(server, [start, start + 1, start + 2])
        stats = _stats(server)
        assert (stats["prompt_cache_entries"], stats["prompt_cache_max_entries"]) == (2, 2)
        one_entry = stats["prompt_cache_bytes"] // 2
    with live_server(max_batch=2, prompt_cache_bytes=one_entry) as server:
        for start in (10, 20, 30):
            _complete(server, [start, start + 1, start + 2])
        stats = _stats(server)
        assert (stats["prompt_cache_entries"], stats["prompt_cache_bytes"]) == (1, one_entry)
        # [10 ...] was evicted; this row's own entry (4 + 6 ids) is over the cap alone,
        # so it is not kept and evicts nothing: the [30 ...] entry still serves
        assert _complete(server, [10, 11, 12, 77])["usage"]["prompt_tokens_details"] == \
            {"cached_tokens": 0}
        assert _complete(server, [30, 31, 32, 77])["usage"]["prompt_tokens_details"] == \
            {"cached_tokens": 3}


def test_a_chat_second_turn_reuses_the_first_and_answers_as_a_fresh_server():
    first = [{"role": "user", "content": "What is the capital of France?"}]
    with live_server(REAL, max_batch=2) as cached:
        api = client(cached)
        one = api.chat.completions.create(model=REAL, messages=first, max_tokens=8,
                                          logprobs=True, top_logprobs=2)
        answer = one.choices[0]
        assert answer.message.content == "The capital of France is Paris."
        second = [*first, {"role": "assistant", "content": answer.message.content},
                  {"role": "user", "content": "And of Italy?"}]
        two = api.chat.completions.create(model=REAL, messages=second, max_tokens=3,
                                          logprobs=True, top_logprobs=2)
        stats = _stats(cached)
    with live_server(REAL, max_batch=2, prompt_cache_size=0) as fresh:
        again = client(fresh).chat.completions.create(model=REAL, messages=second,
                                                      max_tokens=3, logprobs=True,
                                                      top_logprobs=2)
    # turn 1's entry: its prompt, the answer and <|im_end|> (the stop token is fed too);
    # turn 2's template renders the same ids, then "\n<|im_start|>user..."
    held = len(chat_prompt(REAL, first)) + len(answer.token_ids)
    assert chat_prompt(REAL, second)[:held] == (*chat_prompt(REAL, first), *answer.token_ids)
    assert two.usage.prompt_tokens_details.cached_tokens == held
    assert (stats["prompt_cache_hits"], stats["cached_prompt_tokens"]) == (1, held)
    assert two.choices[0].token_ids == again.choices[0].token_ids
    assert two.choices[0].message.content == again.choices[0].message.content
    assert two.choices[0].logprobs.model_dump() == again.choices[0].logprobs.model_dump()
