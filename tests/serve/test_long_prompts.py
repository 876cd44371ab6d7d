"""Long prompts (issue 29): a prompt past the context or ``--max-prompt-tokens`` is a 400;
a long prompt is prefilled a chunk a step between the running rows' tokens, which the
stats show as it goes; a client that leaves stops its prefill."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time

import httpx2
import pytest
from serve_live import MODEL, client, live_server
from serve_oracle import oracle_greedy

from batchlab.engine.core.sampler import GREEDY
from batchlab.serve.engine_thread import Done, ServeEngine, Token
from batchlab.serve.limits import TokenLimits, model_context
from batchlab.zoo import load
from batchlab.zoo.load import resolve

LONG = [3 + (7 * i) % 250 for i in range(161)]  # 160 to prefill, the last fed by decode


def test_a_long_prompt_is_prefilled_a_chunk_a_step_between_a_running_rows_tokens():
    engine = ServeEngine(load(MODEL).model, vocab_size=320, max_batch=4,
                         prefill_step_size=16).start()
    try:
        running, left = threading.Event(), []

        def short_sink(event):  # on the engine thread: the snapshot of the step it is in
            running.set()
            stats = engine.stats()
            if isinstance(event, Token) and stats.prefilling:
                left.append(stats.prefill_tokens_left)
        engine.submit({"prompt": [5, 6], "max_tokens": 400, "sampling": GREEDY,
                       "stop_ids": frozenset()}, short_sink)
        assert running.wait(60)
        events = queue.Queue()
        engine.submit({"prompt": LONG, "max_tokens": 3, "sampling": GREEDY,
                       "stop_ids": frozenset()}, events.put)
        tokens = []
        while not isinstance(event := events.get(timeout=60), Done):
            tokens.append(event.id)
    finally:
        engine.close()
    # one 16-token chunk a step, the running row's token in each; then the join step
    assert left == list(range(160, 0, -16)) + [0]
    assert tokens == oracle_greedy(MODEL, LONG, 3)[0]


def test_a_prompt_past_max_prompt_tokens_is_refused_with_the_numbers():
    with live_server(max_batch=4, max_prompt_tokens=64) as server:
        over = httpx2.post(server.url + "/v1/completions",
                           json={"prompt": list(range(3, 68)), "max_tokens": 1})
        chat = httpx2.post(server.url + "/v1/chat/completions",
                           json={"messages": [{"role": "user", "content": "x" * 80}]})
        fits = client(server).completions.create(model=MODEL, prompt=list(range(3, 67)),
                                                 max_tokens=1)
    assert over.status_code == 400 and over.json()["error"] == {
        "message": "this prompt has 65 tokens, over this server's --max-prompt-tokens of 64: "
                   "shorten it", "type": "invalid_request_error", "param": "prompt",
        "code": "context_length_exceeded"}
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "messages"
    assert fits.usage.prompt_tokens == 64


def test_token_limits_refuse_or_lower_as_the_context_allows():
    limits = TokenLimits(context=8192, max_prompt_tokens=None, default_max_tokens=512)
    assert limits.max_tokens(8000, None, param="prompt") == 192  # lowered to what is left
    assert limits.max_tokens(100, None, param="prompt") == 512
    assert limits.max_tokens(8000, 192, param="prompt") == 192
    with pytest.raises(Exception, match="you requested 8193 tokens .8000 in the prompt, 193"):
        limits.max_tokens(8000, 193, param="prompt")
    with pytest.raises(Exception, match="maximum context length is 8192 tokens, and this "
                       "prompt alone has 8192"):
        limits.max_tokens(8192, None, param="messages")
    assert model_context(resolve("smollm2-135m")) == 8192


def test_a_client_that_leaves_stops_its_prefill_at_the_next_chunk():
    prompt = [3 + (7 * i) % 250 for i in range(6000)]
    with live_server(max_batch=4, prefill_step_size=8) as server:
        body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
        host, port = server.sock.getsockname()[:2]
        conn = socket.create_connection((host, port))
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 60
        while httpx2.get(server.url + "/stats").json()["prefilled_tokens"] < 64:
            assert time.monotonic() < deadline, "the prefill never started"
            time.sleep(0.005)
        conn.close()  # the client leaves mid-prefill
        while (stats := httpx2.get(server.url + "/stats").json())["running"]:
            assert time.monotonic() < deadline, f"the row was never evicted: {stats}"
            time.sleep(0.01)
        again = httpx2.get(server.url + "/stats").json()
    assert 64 <= stats["prefilled_tokens"] < 5999  # stopped part way
    assert again["prefilled_tokens"] == stats["prefilled_tokens"]  # and stays stopped
    assert (stats["prefilling"], stats["prefill_tokens_left"], stats["tokens_generated"]) == (
        0, 0, 0)
