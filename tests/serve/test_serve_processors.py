"""The server's penalties and logit bias are the engine's processors: a request with them
answers what the l1 scheduler answers for a Request with the same ProcessorParams."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from batchlab.engine.batch import Request
from batchlab.engine.config import ScheduleConfig
from batchlab.engine.processors import ProcessorParams
from batchlab.engine.scheduler import Scheduler
from batchlab.serve.cli import start_server
from batchlab.zoo import load

MODEL = "llama"
PROMPT = [104, 101, 108, 108, 111, 104, 101]


@pytest.fixture(scope="module")
def server():
    server = start_server(MODEL, port=0, max_batch=4)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    server.engine.close()


def post(server, body) -> tuple[int, dict]:
    request = urllib.request.Request(server.url + "/v1/completions",
                                     data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def engine_tokens(processors: ProcessorParams | None, n: int) -> list[int]:
    scheduler = Scheduler(load(MODEL).model, ScheduleConfig())
    scheduler.insert([Request(name="x", prompt=tuple(PROMPT), max_tokens=n,
                              processors=processors)])
    out = []
    while scheduler.num_active:
        out += [e.token for e in scheduler.step()]
    return out


def test_penalties_and_bias_are_the_engines_processors(server):
    body = {"prompt": PROMPT, "max_tokens": 10, "presence_penalty": 0.7,
            "frequency_penalty": 0.4, "repetition_penalty": 1.3, "logit_bias": {"33": 4.0}}
    status, reply = post(server, body)
    assert status == 200
    want = engine_tokens(ProcessorParams(logit_bias=((33, 4.0),), presence_penalty=0.7,
                                         frequency_penalty=0.4, repetition_penalty=1.3), 10)
    assert reply["choices"][0]["token_ids"] == want
    assert want != engine_tokens(None, 10)  # the processors changed the answer


@pytest.mark.parametrize("extra, message", [
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"logit_bias": {"999999": 1.0}}, "inside the vocabulary"),
    ({"repetition_penalty": -1.0}, "repetition_penalty"),
])
def test_bad_processor_fields_are_refused(server, extra, message):
    status, reply = post(server, {"prompt": PROMPT, "max_tokens": 2, **extra})
    assert status == 400 and message in reply["error"]["message"]
