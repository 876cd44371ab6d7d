"""The real model (smollm2-135m) through the server and the official openai client: chat
and completions, streamed and not, each equal to mlx-lm's own greedy run."""

from __future__ import annotations

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
