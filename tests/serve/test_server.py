"""``batchlab serve`` end to end on the tiny llama: a real server on a free port.

The served tokens must be the engine's: each test compares what the server returns with
the l1 scheduler run directly on the same prompt (greedy). On the CPU backend a
full-attention model's logits do not depend on B (FACTS.md), so a request answered
while others share its batch must still match its solo run.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request

import pytest

from batchlab.engine.batch import Request
from batchlab.engine.config import ScheduleConfig
from batchlab.engine.sampler import GREEDY
from batchlab.engine.scheduler import Scheduler
from batchlab.serve.cli import start_server
from batchlab.serve.engine import Job, ServeEngine
from batchlab.zoo import ZOO, load

MODEL = "llama"


@pytest.fixture(scope="module")
def server():
    server = start_server(MODEL, port=0, max_batch=8)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    server.engine.close()


def post(server, route: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(server.url + route, data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def get(server, route: str) -> dict:
    with urllib.request.urlopen(server.url + route, timeout=10) as reply:
        return json.loads(reply.read())


def stream(server, body: dict) -> list:
    request = urllib.request.Request(server.url + "/v1/completions",
                                     data=json.dumps({**body, "stream": True}).encode())
    with urllib.request.urlopen(request, timeout=60) as reply:
        events = [line[len(b"data: "):] for line in reply.read().split(b"\n\n") if line]
    assert events[-1] == b"[DONE]"
    return [json.loads(e) for e in events[:-1]]


def solo_tokens(prompt: list[int], max_tokens: int) -> list[int]:
    """The l1 engine alone on one prompt: what the server must answer."""
    scheduler = Scheduler(load(MODEL).model, ScheduleConfig())
    scheduler.insert([Request(name="solo", prompt=tuple(prompt), max_tokens=max_tokens)])
    tokens = []
    while scheduler.num_active:
        tokens += [e.token for e in scheduler.step()]
    return tokens


PROMPTS = [[104, 101, 108, 108, 111], [7], [33, 34, 35, 36, 37, 38, 39, 40, 41], [200, 3]]


def test_a_completion_is_the_engines_greedy_run(server):
    status, reply = post(server, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 6})
    assert status == 200
    choice = reply["choices"][0]
    assert choice["token_ids"] == solo_tokens(PROMPTS[0], 6)
    assert choice["finish_reason"] == "length"
    assert reply["usage"] == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
    assert reply["object"] == "text_completion" and reply["model"] == MODEL


def test_text_prompts_go_through_the_tokenizer(server):
    by_text = post(server, "/v1/completions", {"prompt": "hello", "max_tokens": 4})[1]
    by_ids = post(server, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 4})[1]
    assert by_text["choices"][0]["token_ids"] == by_ids["choices"][0]["token_ids"]
    assert by_text["usage"]["prompt_tokens"] == 5  # the zoo tokenizer is byte-level


def test_concurrent_requests_share_a_batch_and_each_gets_its_own_tokens(server):
    results: dict[int, list[int]] = {}

    def ask(i):
        results[i] = post(server, "/v1/completions",
                          {"prompt": PROMPTS[i], "max_tokens": 12})[1]["choices"][0]["token_ids"]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert {i: results[i] for i in range(len(PROMPTS))} == {
        i: solo_tokens(p, 12) for i, p in enumerate(PROMPTS)}


def test_a_stream_carries_the_same_tokens_and_ends_with_done(server):
    chunks = stream(server, {"prompt": PROMPTS[2], "max_tokens": 5})
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == solo_tokens(PROMPTS[2], 5)
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["usage"]["completion_tokens"] == 5


def test_a_stop_token_ends_the_row(server):
    first, second = solo_tokens(PROMPTS[1], 2)
    status, reply = post(server, "/v1/completions",
                         {"prompt": PROMPTS[1], "max_tokens": 10, "stop_token_ids": [second]})
    assert status == 200
    assert reply["choices"][0]["token_ids"] == [first, second]
    assert reply["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "not JSON"),
    ({"prompt": []}, "prompt is empty"),
    ({"prompt": [1, 10**9]}, "outside the vocabulary"),
    ({"prompt": [1], "max_tokens": 0}, "max_tokens must be >= 1"),
    ({"prompt": [1], "temperature": "hot"}, "'temperature' must be a number"),
    ({"prompt": [1], "top_p": 0}, "0 < top_p <= 1"),
    ({"prompt": [1], "n": 3}, "only n = 1"),
    ({"prompt": [1], "stop": ["\n"]}, "stop_token_ids"),
    ({"prompt": [[1], [2]]}, "one string or one list of token ids"),
])
def test_bad_requests_get_a_400_that_says_what_to_change(server, body, message):
    status, reply = post(server, "/v1/completions", body)
    assert status == 400
    assert message in reply["error"]["message"]


def test_chat_renders_the_zoo_template_and_unknown_routes_are_404(server):
    status, reply = post(server, "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    prompt = [256, *b"user\nhi", 257, 10, 256, *b"assistant\n"]  # zoo/tokenizer.CHAT_TEMPLATE
    assert status == 200 and reply["usage"]["prompt_tokens"] == len(prompt)
    assert reply["choices"][0]["token_ids"] == solo_tokens(prompt, 4)
    assert post(server, "/v2/anything", {})[0] == 404


def test_health_models_and_stats(server):
    # generate here: under pytest -n the other tests may run in another process
    assert post(server, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 2})[0] == 200
    assert get(server, "/health") == {"status": "ok"}
    assert get(server, "/v1/models")["data"][0]["id"] == MODEL
    stats = get(server, "/stats")
    assert stats["kv_budget"] is None and stats["tokens_generated"] > 0


def test_a_client_that_leaves_mid_stream_frees_its_row(server):
    body = json.dumps({"prompt": PROMPTS[0], "max_tokens": 100_000, "stream": True})
    with socket.create_connection(server.server_address[:2], timeout=30) as sock:
        sock.sendall(f"POST /v1/completions HTTP/1.0\r\nContent-Length: {len(body)}\r\n\r\n"
                     f"{body}".encode())
        received = b""
        while b"data: " not in received:  # the headers, then the first token
            chunk = sock.recv(4096)
            assert chunk, "the server closed the stream before its first token"
            received += chunk
    for _ in range(500):  # the engine notices on its next write, then evicts the row
        stats = get(server, "/stats")
        if stats["running"] == 0 and stats["waiting"] == 0:
            break
        threading.Event().wait(0.02)
    assert stats["running"] == 0 and stats["waiting"] == 0


# -- KV-budget admission, on the engine itself (deterministic: no thread running) ----------


def _engine(kv_budget: int | None) -> ServeEngine:
    return ServeEngine(load(MODEL).model, max_batch=8, kv_budget=kv_budget, vocab_size=512)


def test_admission_holds_rows_that_would_exceed_the_kv_budget():
    one_row = _engine(None).row_cost.batch_bytes([4 + 6])
    engine = _engine(kv_budget=one_row)
    jobs = [Job(name=f"j{i}", prompt=(1, 2, 3, 4), max_tokens=6, sampling=GREEDY,
                stop_ids=frozenset()) for i in range(3)]
    engine._waiting = list(jobs)
    engine._admit()
    assert list(engine._running) == ["j0"] and engine._waiting == jobs[1:]
    engine._finish(jobs[0], "cancelled")
    engine._admit()
    assert list(engine._running) == ["j1"]  # first come, first served


def test_a_request_that_can_never_fit_is_refused_with_the_numbers():
    engine = _engine(kv_budget=1000)
    with pytest.raises(ValueError, match=r"needs \d+ bytes of KV cache .* --kv-budget of 1000"):
        engine.submit([1, 2, 3], max_tokens=100, sampling=GREEDY)


def test_row_cost_counts_padding_to_the_longest_row():
    cost = _engine(None).row_cost
    assert cost.per_token > 0
    assert cost.batch_bytes([10, 30]) == 2 * cost.row_bytes(30)


def test_an_engine_crash_fails_every_job_with_its_reason_and_refuses_new_ones():
    engine = _engine(None)

    def broken_step():
        raise RuntimeError("seeded engine bug")

    engine.scheduler.step = broken_step
    engine.start()
    try:
        job = engine.submit([1, 2, 3], max_tokens=4, sampling=GREEDY)
        done = job.events.get(timeout=30)
        assert done.reason == "error" and "seeded engine bug" in done.error
        with pytest.raises(RuntimeError, match="engine stopped after an error"):
            engine.submit([1], max_tokens=1, sampling=GREEDY)
    finally:
        engine.close()


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_zoo_model_serves_a_text_prompt(name):
    server = start_server(name, port=0, max_batch=2, kv_budget=10**7)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        status, reply = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 3})
        assert status == 200, reply
        assert len(reply["choices"][0]["token_ids"]) == reply["usage"]["completion_tokens"]
        assert reply["choices"][0]["finish_reason"] in ("length", "stop")
        assert server.engine.row_cost.batch_bytes([2 + 3]) > 0  # every model holds state
    finally:
        server.shutdown()
        server.server_close()
        server.engine.close()


def test_serve_refuses_a_bad_path_or_a_path_that_cannot_run_the_model(capsys):
    from batchlab.cli import main

    assert main(["serve", "--model", MODEL, "--path", "l9"]) == 2
    assert "unknown path 'l9'" in capsys.readouterr().out
    assert main(["serve", "--model", "gemma3", "--path", "compiled"]) == 2
    assert "cannot serve gemma3" in capsys.readouterr().out


def test_the_fast_path_serves_the_same_tokens_on_cpu():
    # on the CPU backend fast drops only all-True masks, which cannot change a bit
    server = start_server(MODEL, path="fast", port=0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        reply = post(server, "/v1/completions", {"prompt": PROMPTS[2], "max_tokens": 6})[1]
        assert reply["choices"][0]["token_ids"] == solo_tokens(PROMPTS[2], 6)
    finally:
        server.shutdown()
        server.server_close()
        server.engine.close()


def test_streamed_text_adds_up_to_the_whole_answer(server):
    # the text is mlx-lm's streaming detokenizer's, as mlx_lm.server sends it (the zoo's
    # random models also emit ids past the byte tokenizer's 259, which it cannot spell)
    body = {"prompt": "hello", "max_tokens": 12}
    whole = post(server, "/v1/completions", body)[1]["choices"][0]
    chunks = stream(server, body)
    assert whole["text"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == whole["token_ids"]
