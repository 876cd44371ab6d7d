"""The server's penalties and logit bias are the engine's processors: a request with them
answers what the l1 scheduler answers for a Request with the same ProcessorParams."""

from __future__ import annotations

import httpx2
import pytest
from serve_live import live_server

from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.processors import ProcessorParams
from batchlab.engine.core.scheduler import Scheduler
from batchlab.zoo import load

MODEL = "llama"
PROMPT = [104, 101, 108, 108, 111, 104, 101]


@pytest.fixture(scope="module")
def server():
    with live_server(MODEL) as s:
        yield s


def post(server, body) -> tuple[int, dict]:
    reply = httpx2.post(server.url + "/v1/completions", json=body, timeout=60)
    return reply.status_code, reply.json()


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
            "frequency_penalty": 0.4, "repetition_penalty": 1.3, "logit_bias": {"33": 4.0},
            "stop_token_ids": []}
    status, reply = post(server, body)
    assert status == 200, reply
    want = engine_tokens(ProcessorParams(logit_bias=((33, 4.0),), presence_penalty=0.7,
                                         frequency_penalty=0.4, repetition_penalty=1.3), 10)
    assert reply["choices"][0]["token_ids"] == want
    assert want != engine_tokens(None, 10)  # the processors changed the answer


@pytest.mark.parametrize("extra, message, param", [
    ({"logit_bias": {"x": 1}}, "logit_bias keys are token ids", "logit_bias"),
    # the ids outside the vocabulary, not the first ids of the map
    ({"logit_bias": {"5": 1.0, "6": 1.0, "7": 1.0, "8": 1.0, "9": 1.0, "999999": 1.0}},
     "logit_bias: token ids [999999] are outside the vocabulary [0, 320)", "logit_bias"),
    ({"repetition_penalty": -1.0}, "repetition_penalty", "repetition_penalty"),
    ({"presence_penalty": 3.0}, "presence_penalty", "presence_penalty"),
])
def test_bad_processor_fields_are_refused(server, extra, message, param):
    status, reply = post(server, {"prompt": PROMPT, "max_tokens": 2, **extra})
    assert status == 400 and message in reply["error"]["message"]
    assert reply["error"]["param"] == param
