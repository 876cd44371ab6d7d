"""No request can hurt another: bursts, malformed input, faults, seeds, disconnects,
shutdown, and the decode-concurrency limit, each against its own live server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import httpx2
import openai
from serve_live import MODEL, client, live_server
from serve_oracle import oracle_greedy

from batchlab.engine.core.sampler import RowSampler

NO_STOP = {"stop_token_ids": []}


def _solo(server, prompt, max_tokens):
    return client(server).completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens,
                                             extra_body=NO_STOP).choices[0].token_ids


def test_64_concurrent_mixed_requests_equal_their_solo_runs_and_share_a_batch():
    prompts = [[(7 * i + j) % 250 + 3 for j in range(1 + i % 9)] for i in range(64)]
    lengths = [3 + i % 6 for i in range(64)]
    with live_server(max_batch=32) as server:
        solo = [_solo(server, p, n) for p, n in zip(prompts[:8], lengths[:8])]

        async def burst():
            api = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)

            async def one(i):
                kind = i % 3
                if kind == 2:
                    chunks = [c async for c in await api.completions.create(
                        model=MODEL, prompt=prompts[i], max_tokens=lengths[i], stream=True,
                        extra_body=NO_STOP)]
                    return [t for c in chunks for t in c.choices[0].token_ids]
                reply = await api.completions.create(
                    model=MODEL, prompt=prompts[i], max_tokens=lengths[i], extra_body=NO_STOP,
                    temperature=0.9 if kind == 1 else 0, seed=i)
                return reply.choices[0].token_ids
            return await asyncio.gather(*[one(i) for i in range(64)])

        got = asyncio.run(burst())
        stats = httpx2.get(server.url + "/stats").json()
    greedy = [i for i in range(64) if i % 3 != 1]
    assert [got[i] for i in greedy if i < 8] == [solo[i] for i in greedy if i < 8]
    for i in greedy[::5]:
        assert got[i] == oracle_greedy(MODEL, prompts[i], lengths[i])[0], i
    assert [len(got[i]) for i in range(64)] == lengths
    assert 8 < stats["peak_decoding"] <= 32  # they really shared a batch, within the limit


def test_a_128_request_burst_loses_no_connection():
    with live_server(max_batch=32) as server:
        async def burst():
            # at once, so each opens its own connection: the listen backlog takes the burst
            limits = httpx2.Limits(max_connections=256, max_keepalive_connections=0)
            async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
                async def one(i):
                    r = await http.post(server.url + "/v1/completions",
                                        json={"prompt": [3 + i % 200], "max_tokens": 1})
                    return r.status_code
                return await asyncio.gather(*[one(i) for i in range(128)],
                                            return_exceptions=True)
        results = asyncio.run(burst())
    assert results == [200] * 128


MALFORMED = [
    b"{", b"", b"null", b"[1, 2]", b'"text"', b"[" * 50000 + b"]" * 50000,
    json.dumps({"prompt": "\ud800"}).encode(), b'{"prompt": "a", "max_tokens": 1e400}',
    b'{"prompt": "a", "max_tokens": NaN}', b'{"prompt": "a", "temperature": Infinity}',
    b'{"prompt": "a", "max_tokens": 0}', b'{"prompt": "a", "max_tokens": -3}',
    b'{"prompt": "a", "max_tokens": "5"}', b'{"prompt": "a", "max_tokens": 2.5}',
    b'{"prompt": "a", "max_tokens": 1000000}', b'{"prompt": "a", "temperature": -1}',
    b'{"prompt": "a", "temperature": 3}', b'{"prompt": "a", "top_p": -0.1}',
    b'{"prompt": "a", "top_p": 1.5}', b'{"prompt": "a", "top_k": -2}',
    b'{"prompt": "a", "min_p": 1}', b'{"prompt": "a", "seed": -1, "temperature": 1}',
    b'{"prompt": "a", "seed": 18446744073709551616, "temperature": 1}',
    b'{"prompt": "a", "seed": "x"}', b'{"prompt": "a", "n": 0}', b'{"prompt": "a", "n": 99}',
    b'{"prompt": "a", "stream": "yes"}', b'{"prompt": "a", "stop": 5}',
    b'{"prompt": "a", "stop_token_ids": ["a"]}', b'{"prompt": "a", "logprobs": 50}',
    b'{"prompt": "a", "presence_penalty": 5}', b'{"prompt": "a", "frequency_penalty": "x"}',
    b'{"prompt": "a", "repetition_penalty": -1}', b'{"prompt": "a", "logit_bias": {"x": 3}}',
    b'{"prompt": "a", "logit_bias": {"5": 200}}',
    b'{"prompt": "a", "best_of": 3}', b'{"prompt": "a", "echo": true}',
    b'{"prompt": "a", "suffix": "z"}', b'{"prompt": "a", "tools": [{}]}',
    b'{"prompt": "a", "response_format": {"type": "json_object"}}',
    b'{"prompt": "a", "unknown_field": 1}', b'{"prompt": "a", "model": "gpt-4"}',
    b'{"prompt": []}', b'{"prompt": [[]]}', b'{"prompt": [999999]}', b'{"prompt": [-1]}',
    b'{"prompt": [1.5]}', b'{"prompt": {"a": 1}}', b'{"max_tokens": 3}',
    b'{"prompt": "a", "stream_options": {"include_usage": "x"}}',
    b'{"prompt": "a", "stream_options": {"other": true}}',
]
MALFORMED_CHAT = [
    b'{"messages": [1, 2]}', b'{"messages": []}', b'{"messages": "hi"}',
    b'{"messages": [{"role": "wizard", "content": "x"}]}', b'{"messages": [{"content": "x"}]}',
    b'{"messages": [{"role": "user", "content": 5}]}',
    b'{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}',
    b'{"messages": [{"role": "user", "content": "x"}], "logprobs": 3}',
    json.dumps({"messages": [{"role": "user", "content": "\udfff"}]}).encode(),
]


def _raw(server, request: bytes) -> tuple[int, dict]:
    """Bytes no HTTP client would send; the answer's status and JSON body."""
    host, port = server.sock.getsockname()[:2]
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            part = conn.recv(65536)
            if not part:
                break
            data += part
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_malformed_requests_each_get_a_4xx_in_openais_shape_while_serving_goes_on():
    with live_server(max_batch=8, max_tokens=4096) as server:
        long = {}

        def stream_long():
            long["tokens"] = [t for c in client(server).completions.create(
                model=MODEL, prompt=[5, 6], max_tokens=300, stream=True, extra_body=NO_STOP)
                for t in c.choices[0].token_ids]
        worker = threading.Thread(target=stream_long)
        worker.start()
        answers = []
        with httpx2.Client(base_url=server.url, timeout=30) as http:
            for route, bodies in (("/v1/completions", MALFORMED),
                                  ("/v1/chat/completions", MALFORMED_CHAT)):
                for body in bodies:
                    r = http.post(route, content=body,
                                  headers={"Content-Type": "application/json"})
                    answers.append((body[:60], r.status_code, r.json()))
            others = [http.get("/v1/completions"), http.put("/v1/chat/completions"),
                      http.get("/v1/nothing")]
            answers += [(r.request.url.path, r.status_code, r.json()) for r in others]
            answers.append(("huge Content-Length", *_raw(server, b"POST /v1/completions HTTP/1.1"
                            b"\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n{}")))
            r = http.post("/v1/completions", content=b"x" * (5 * 2**20))
            answers.append(("5 MiB body", r.status_code, r.json()))
            ok = http.post("/v1/completions", json={"prompt": [5, 6], "max_tokens": 4,
                                                    **NO_STOP})
        worker.join(60)
    assert len(answers) >= 50
    for what, status, body in answers:
        assert 400 <= status < 500, (what, status, body)
        assert set(body["error"]) == {"message", "type", "param", "code"}, what
        assert body["error"]["message"] and body["error"]["type"], what
    assert [s for _, s, _ in answers[-5:]] == [405, 405, 404, 413, 413]
    named = {a[2]["error"]["param"] for a in answers}
    assert {"presence_penalty", "logit_bias", "seed", "max_tokens", "unknown_field"} <= named
    assert ok.status_code == 200 and len(long["tokens"]) == 300
    assert long["tokens"] == oracle_greedy(MODEL, [5, 6], 300)[0]


def test_a_half_sent_body_gets_a_408_and_holds_nothing():
    with live_server() as server:
        server.state.body_timeout_s = 0.3
        status, body = _raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                            b"Content-Length: 100\r\n\r\n{\"prompt\"")
        ok = _solo(server, [5, 6], 3)
    assert status == 408 and body["error"]["code"] == "timeout"
    assert ok == oracle_greedy(MODEL, [5, 6], 3)[0]


def test_seeds_repeat_a_draw_whatever_the_batch_and_no_seed_is_random():
    with live_server(max_batch=8) as server:
        api = client(server)

        def draw(**kw):
            return api.completions.create(model=MODEL, prompt=[9, 10], max_tokens=12,
                                          temperature=1.0, extra_body=NO_STOP,
                                          **kw).choices[0].token_ids
        alone = draw(seed=2**64 - 1)
        results = {}
        threads = [threading.Thread(target=lambda i=i: results.update({i: draw(seed=2**64 - 1)}))
                   for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        unseeded = {tuple(draw()) for _ in range(3)}
        bad = httpx2.post(server.url + "/v1/completions",
                          json={"prompt": "a", "seed": -1, "temperature": 1})
        after = draw(seed=2**64 - 1)
    assert all(r == alone for r in results.values())
    assert len(unseeded) == 3
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "seed"
    assert after == alone  # the engine still serves


class _FaultySampler(RowSampler):
    def __init__(self, params):
        super().__init__(params)
        self.calls = 0

    def __call__(self, logprobs):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("injected fault")
        return super().__call__(logprobs)


def test_a_fault_in_one_row_ends_that_row_alone():
    def sampler_for(job):
        return _FaultySampler(job.sampling) if job.prompt == (66, 66) else RowSampler(job.sampling)

    with live_server(max_batch=8, sampler_factory=sampler_for) as server:
        results = {}

        def ask(key, prompt, temperature):
            try:
                results[key] = client(server).completions.create(
                    model=MODEL, prompt=prompt, max_tokens=20, temperature=temperature, seed=1,
                    extra_body=NO_STOP).choices[0].token_ids
            except openai.APIError as err:
                results[key] = err
        threads = [threading.Thread(target=ask, args=("bad", [66, 66], 1.0))] + [
            threading.Thread(target=ask, args=(i, [20 + i, 30], 0)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        health = httpx2.get(server.url + "/health").json()
        later = _solo(server, [20, 30], 20)
    assert isinstance(results["bad"], openai.InternalServerError)
    assert "injected fault" in str(results["bad"])
    for i in range(4):
        assert results[i] == oracle_greedy(MODEL, [20 + i, 30], 20)[0]
    assert health["status"] == "ok" and later == results[0]


def _wait_idle(server, timeout=10.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = httpx2.get(server.url + "/stats").json()
        if stats["running"] == 0 and stats["waiting"] == 0:
            return stats
        time.sleep(0.02)
    raise AssertionError(f"rows still running: {stats}")


def test_a_client_that_leaves_frees_its_row_streamed_or_not():
    with live_server(max_batch=8, max_tokens=100000) as server:
        body = {"prompt": [5, 6], "max_tokens": 100000, **NO_STOP}
        with httpx2.Client(timeout=60) as http, http.stream(
                "POST", server.url + "/v1/completions", json={**body, "stream": True}) as r:
            next(r.iter_lines())
        streamed = _wait_idle(server)["tokens_generated"]
        with contextlib.suppress(httpx2.TimeoutException):
            httpx2.post(server.url + "/v1/completions", json=body, timeout=0.5)
        whole = _wait_idle(server)["tokens_generated"] - streamed
    assert 0 < streamed < 100000 and 0 < whole < 100000


def test_the_decode_concurrency_limit_is_respected_exactly():
    with live_server(max_batch=4, prompt_concurrency=8) as server:
        seen = []
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                seen.append(httpx2.get(server.url + "/stats").json())
        watcher = threading.Thread(target=watch)
        watcher.start()
        threads = [threading.Thread(target=_solo, args=(server, [3 + i, 4], 40))
                   for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        watcher.join()
        final = httpx2.get(server.url + "/stats").json()
    assert max(s["running"] for s in seen) == 4
    assert max(s["waiting"] for s in seen) > 0
    assert final["peak_decoding"] == 4


def test_shutdown_lets_short_rows_finish_and_ends_long_ones_with_an_error():
    with live_server(max_batch=8, max_tokens=100000, grace_s=1.0) as server:
        out = {}

        def long_stream():
            with httpx2.Client(timeout=60) as http, http.stream(
                    "POST", server.url + "/v1/completions",
                    json={"prompt": [5, 6], "max_tokens": 100000, "stream": True,
                          **NO_STOP}) as r:
                out["events"] = [line for line in r.iter_lines() if line]

        def long_whole():
            r = httpx2.post(server.url + "/v1/completions", timeout=60,
                            json={"prompt": [7, 8], "max_tokens": 100000, **NO_STOP})
            out["whole"] = (r.status_code, r.json())

        def short():  # 40 tokens of this model take well under the grace second
            out["short"] = _solo(server, [9, 9], 40)
        threads = [threading.Thread(target=f) for f in (long_stream, long_whole, short)]
        for t in threads:
            t.start()
        # all three admitted (2 prompt ids each); not "running == 3": on a loaded machine
        # the short row can finish before the others arrive, and that poll never ended
        deadline = time.monotonic() + 30
        while httpx2.get(server.url + "/stats").json()["prompt_tokens"] < 6:
            assert time.monotonic() < deadline, "the three requests were not admitted"
            time.sleep(0.005)
        server.stop()  # what SIGTERM / SIGINT call
        refused = None
        try:
            refused = httpx2.post(server.url + "/v1/completions",
                                  json={"prompt": "a", "max_tokens": 2}, timeout=5).status_code
        except httpx2.TransportError:
            refused = "refused"
        for t in threads:
            t.join(30)
    events = out["events"]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-3][6:])["choices"][0]["finish_reason"] == "error"
    assert "shut down" in json.loads(events[-2][6:])["error"]["message"]
    status, body = out["whole"]
    assert status == 503 and "shut down" in body["error"]["message"]
    assert len(out["short"]) == 40
    assert refused in (503, "refused")
