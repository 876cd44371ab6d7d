"""The serve engine without HTTP: KV-budget admission, crash recovery, the CLI's refusals."""

from __future__ import annotations

import queue
import time

import httpx2
from serve_live import MODEL, client, live_server
from serve_oracle import oracle_greedy

from batchlab.engine.core.sampler import GREEDY
from batchlab.serve.engine_thread import Done, ServeEngine, Token
from batchlab.zoo import load


def _engine(kv_budget: int | None, max_batch: int = 8) -> ServeEngine:
    return ServeEngine(load(MODEL).model, max_batch=max_batch, kv_budget=kv_budget,
                       vocab_size=256)


def _job(engine, prompt, max_tokens):
    events = queue.Queue()
    engine.submit({"prompt": prompt, "max_tokens": max_tokens, "sampling": GREEDY},
                  events.put)
    return events


def _drain(events) -> tuple[list[int], Done]:
    tokens = []
    while True:
        event = events.get(timeout=30)
        if isinstance(event, Token):
            tokens.append(event.id)
        else:
            return tokens, event


def test_admission_holds_rows_that_would_exceed_the_kv_budget():
    engine = _engine(None)
    two = engine.row_cost.batch_bytes([4 + 6, 4 + 6])  # two rows fit, a third does not
    engine = _engine(two).start()
    try:
        jobs = [_job(engine, [3, 4, 5, 6], 6) for _ in range(3)]
        results = [_drain(j) for j in jobs]
    finally:
        engine.close()
    assert [len(t) for t, _ in results] == [6, 6, 6]
    assert engine.stats().peak_decoding == 2
    assert results[0][0] == oracle_greedy(MODEL, [3, 4, 5, 6], 6)[0]


def test_each_job_records_whom_its_row_decoded_beside():
    engine = _engine(None)
    # queued before the thread starts: admitted together, they decode as one batch
    queues = [queue.Queue(), queue.Queue()]
    together = [engine.submit({"prompt": [3, 4, 5], "max_tokens": n, "sampling": GREEDY},
                              q.put) for n, q in zip((4, 7), queues)]
    engine.start()
    try:
        for q in queues:
            _drain(q)
        alone = engine.submit({"prompt": [9, 8, 7], "max_tokens": 3, "sampling": GREEDY},
                              queue.Queue().put)
        while not alone.finished:
            time.sleep(0.01)
    finally:
        engine.close()
    short, long = together
    assert (short.peak_rows, short.shared_steps) == (2, 4)
    assert (long.peak_rows, long.shared_steps) == (2, 4)  # its last 3 tokens came alone
    assert (alone.peak_rows, alone.shared_steps) == (1, 0)


def test_a_request_that_can_never_fit_is_refused_with_the_numbers():
    engine = _engine(10)
    try:
        engine.submit({"prompt": [1, 2], "max_tokens": 5, "sampling": GREEDY}, print)
    except ValueError as err:
        assert "over the server's --kv-budget of 10" in str(err)
    else:
        raise AssertionError("a request over the budget was queued")


def test_row_cost_counts_padding_to_the_longest_row():
    cost = _engine(None).row_cost
    assert cost.batch_bytes([3, 10]) == 2 * cost.row_bytes(10) > 0


def test_an_engine_crash_fails_the_rows_in_flight_then_the_engine_goes_on():
    with live_server(max_batch=4) as server:
        scheduler = server.engine.scheduler
        real_step = scheduler.step
        calls = {"n": 0}

        def broken_step():
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("injected engine bug")
            return real_step()
        scheduler.step = broken_step
        r = httpx2.post(server.url + "/v1/completions", timeout=30,
                        json={"prompt": [5, 6], "max_tokens": 10, "stop_token_ids": []})
        health = httpx2.get(server.url + "/health").json()
        after = client(server).completions.create(model=MODEL, prompt=[5, 6], max_tokens=4,
                                                  extra_body={"stop_token_ids": []})
    assert r.status_code == 500 and "injected engine bug" in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "server_error"
    assert health["engine_crashes"] == 1 and "injected engine bug" in health["last_crash"]
    assert after.choices[0].token_ids == oracle_greedy(MODEL, [5, 6], 4)[0]


def test_metrics_are_prometheus_text_with_the_engine_gauges(server):
    client(server).completions.create(model=MODEL, prompt=[5], max_tokens=3)
    text = httpx2.get(server.url + "/metrics").text
    for name in ("batchlab_running_rows", "batchlab_waiting_rows",
                 "batchlab_projected_kv_bytes", "batchlab_tokens_per_second",
                 "batchlab_time_to_first_token_seconds_bucket",
                 "batchlab_inter_token_latency_seconds_count"):
        assert name in text, name


def test_serve_refuses_a_bad_path_or_a_path_that_cannot_run_the_model(capsys):
    from batchlab.cli import main

    assert main(["serve", "--model", MODEL, "--path", "l9"]) == 2
    assert "unknown path 'l9'" in capsys.readouterr().out
    assert main(["serve", "--model", "gemma3", "--path", "compiled"]) == 2
    assert "cannot serve gemma3" in capsys.readouterr().out
