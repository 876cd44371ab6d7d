"""An engine fault ends the requests it touches with an error, and nothing hangs: a step
that raises (every row in it fails, streamed or not; the queued rows go on, equal to
mlx-lm; /health says degraded), a prompt-cache entry that cannot be kept (the row's
answer is whole anyway), and a recovery that raises too (every request gets an error,
new ones a 503)."""

from __future__ import annotations

import json
import threading
import time

import httpx2
from serve_live import MODEL, client, live_server
from serve_oracle import oracle_greedy

NO_STOP = {"stop_token_ids": []}


def _stats(server) -> dict:
    return httpx2.get(server.url + "/stats").json()


def _until(server, test, what: str) -> dict:
    deadline = time.monotonic() + 60
    while not test(stats := _stats(server)):
        assert time.monotonic() < deadline, f"never {what}: {stats}"
        time.sleep(0.01)
    return stats


def _stream_events(server, body) -> list[str]:
    with httpx2.Client(timeout=60) as http, http.stream(
            "POST", server.url + "/v1/completions", json={**body, "stream": True}) as r:
        return [line for line in r.iter_lines() if line]


def test_a_step_that_raises_fails_its_rows_and_the_queued_ones_go_on():
    with live_server(max_batch=2, max_tokens=100000) as server:
        out = {}

        def run(key, work):
            out[key] = work()
        long = {"prompt": [5, 6], "max_tokens": 100000, **NO_STOP}
        threads = [
            threading.Thread(target=run, args=("stream", lambda: _stream_events(server, long))),
            threading.Thread(target=run, args=("whole", lambda: httpx2.post(
                server.url + "/v1/completions", json={**long, "prompt": [7, 8]}, timeout=60)))]
        for t in threads:
            t.start()
        _until(server, lambda s: s["decoding"] == 2, "two rows decoding")
        queued = [threading.Thread(target=run, args=(i, lambda i=i: client(server).completions
                                                     .create(model=MODEL, prompt=[20 + i, 30],
                                                             max_tokens=6, extra_body=NO_STOP)
                                                     .choices[0].token_ids))
                  for i in range(2)]
        for t in queued:
            t.start()
        _until(server, lambda s: s["waiting"] == 2, "two requests queued")
        scheduler = server.engine.scheduler

        def broken_step():
            raise RuntimeError("injected engine bug")
        scheduler.step = broken_step  # the next step raises; the fresh scheduler is whole
        for t in threads + queued:
            t.join(60)
        health = httpx2.get(server.url + "/health")
        after = _stats(server)
    events = out["stream"]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-3][6:])["choices"][0]["finish_reason"] == "error"
    assert "injected engine bug" in json.loads(events[-2][6:])["error"]["message"]
    whole = out["whole"]
    assert whole.status_code == 500 and whole.json()["error"]["type"] == "server_error"
    assert "injected engine bug" in whole.json()["error"]["message"]
    for i in range(2):  # not in the broken step: served whole, as mlx-lm answers
        assert out[i] == oracle_greedy(MODEL, [20 + i, 30], 6)[0]
    assert health.status_code == 503
    assert health.json()["status"] == "degraded" and health.json()["engine_crashes"] == 1
    assert "injected engine bug" in health.json()["last_fault"]
    assert (after["crashes"], after["running"], after["waiting"]) == (1, 0, 0)


def test_a_cache_entry_that_cannot_be_kept_leaves_the_answer_whole():
    with live_server(max_batch=4) as server:
        cache = server.engine.worker.prompt_cache

        def broken_insert(history):
            raise AttributeError("'tuple' object has no attribute 'nbytes'")
        cache.insert = broken_insert
        api = client(server)
        first = api.completions.create(model=MODEL, prompt=[5, 6, 7], max_tokens=5,
                                       extra_body=NO_STOP)
        events = _stream_events(server, {"prompt": [8, 9], "max_tokens": 5, **NO_STOP})
        health = httpx2.get(server.url + "/health").json()
        stats = _stats(server)
    assert first.choices[0].token_ids == oracle_greedy(MODEL, [5, 6, 7], 5)[0]
    assert first.choices[0].finish_reason == "length"
    finish = [json.loads(e[6:])["choices"][0]["finish_reason"] for e in events[:-1]]
    assert finish[-1] == "length" and events[-1] == "data: [DONE]"
    assert health["status"] == "degraded" and "nbytes" in health["last_fault"]
    assert (stats["row_faults"], stats["crashes"], stats["prompt_cache_entries"]) == (2, 0, 0)


def test_a_recovery_that_raises_ends_every_request_and_refuses_new_ones():
    with live_server(max_batch=1, max_tokens=100000) as server:
        out = {}

        def ask(key, prompt):
            out[key] = httpx2.post(server.url + "/v1/completions", timeout=60, json={
                "prompt": prompt, "max_tokens": 100000, **NO_STOP})
        threads = [threading.Thread(target=ask, args=(k, p)) for k, p in (("a", [5]), ("b", [6]))]
        for t in threads:
            t.start()
        _until(server, lambda s: s["running"] == 1 and s["waiting"] == 1, "one in, one queued")
        worker = server.engine.worker

        def broken_step():
            raise RuntimeError("injected step bug")

        def broken_recovery():
            raise RuntimeError("injected recovery bug")
        worker.scheduler.step = broken_step
        worker._new_scheduler = broken_recovery
        for t in threads:
            t.join(60)
        health = httpx2.get(server.url + "/health")
        refused = httpx2.post(server.url + "/v1/completions", json={"prompt": [5], "max_tokens": 1})
    assert [out[k].status_code for k in "ab"] == [500, 500]
    assert sorted(out[k].json()["error"]["message"] for k in "ab") == [
        "the engine failed: RuntimeError: injected step bug",  # the row in the step
        "the engine stopped before this request finished"]  # the queued one
    assert health.status_code == 503 and health.json()["status"] == "failed"
    assert refused.status_code == 503 and "stopped" in refused.json()["error"]["message"]
