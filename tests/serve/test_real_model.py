"""The real model (smollm2-135m) through the server and the official openai client: chat
and completions, streamed and not, each equal to mlx-lm's own greedy run."""

from __future__ import annotations

import httpx2
import pytest
from serve_live import client, live_server
from serve_oracle import oracle_greedy

from batchlab.zoo.chat import chat_prompt
from batchlab.zoo.text import encode_text

MODEL = "smollm2-135m"
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server():
    with live_server(MODEL, max_batch=4) as s:
        yield s


def test_a_greedy_chat_answer_is_paris_and_mlx_lms(server):
    api = client(server)
    whole = api.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=8)
    assert whole.choices[0].message.content == "The capital of France is Paris."
    assert whole.choices[0].finish_reason == "stop"  # <|im_end|> ends it, not in the text
    chunks = list(api.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=8,
                                              stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == \
        whole.choices[0].message.content
    tokens = oracle_greedy(MODEL, list(chat_prompt(MODEL, FRANCE)), 8)[0]
    assert whole.choices[0].token_ids == tokens[:len(whole.choices[0].token_ids)]


def test_completions_streamed_and_whole_equal_mlx_lm(server):
    api = client(server)
    prompt = "The quick brown fox"
    whole = api.completions.create(model=MODEL, prompt=prompt, max_tokens=3,
                                   extra_body={"stop_token_ids": []})
    chunks = list(api.completions.create(model=MODEL, prompt=prompt, max_tokens=3,
                                         stream=True, extra_body={"stop_token_ids": []}))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert whole.choices[0].token_ids == oracle_greedy(MODEL, encode_text(MODEL, prompt), 3)[0]


def test_a_prompt_past_the_context_is_refused_before_any_work(server):
    over = httpx2.post(server.url + "/v1/completions",
                       json={"prompt": list(range(3, 9003)), "max_tokens": 1})
    asks = httpx2.post(server.url + "/v1/completions",
                       json={"prompt": list(range(3, 8003)), "max_tokens": 200})
    assert over.status_code == 400 and over.json()["error"] == {
        "message": "This model's maximum context length is 8192 tokens, and this prompt "
                   "alone has 9000: shorten the prompt (it must leave room for at least one "
                   "token)", "type": "invalid_request_error", "param": "prompt",
        "code": "context_length_exceeded"}
    assert asks.status_code == 400 and asks.json()["error"]["message"].startswith(
        "This model's maximum context length is 8192 tokens. However, you requested 8200 "
        "tokens (8000 in the prompt, 200 in the completion)")
    stats = httpx2.get(server.url + "/stats").json()
    assert stats["prefilled_tokens"] < 8000  # neither reached the engine
