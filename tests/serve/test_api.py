"""The API as OpenAI's official client uses it, each answer checked against mlx-lm."""

from __future__ import annotations

import pytest
from serve_live import MODEL, client, live_server
from serve_oracle import oracle_greedy

from batchlab.zoo import ZOO
from batchlab.zoo.chat import chat_prompt

PROMPT = [104, 101, 108, 108, 111]
NO_STOP = {"stop_token_ids": []}  # the oracle runs without stop tokens


@pytest.mark.parametrize("model", sorted(ZOO))
def test_greedy_tokens_and_logprobs_are_mlx_lms(model):
    with live_server(model, max_batch=4) as server:
        reply = client(server).completions.create(
            model=model, prompt=PROMPT, max_tokens=8, logprobs=3, extra_body=NO_STOP)
    tokens, logprobs, rows = oracle_greedy(model, PROMPT, 8)
    choice = reply.choices[0]
    assert choice.token_ids == tokens
    assert choice.logprobs.token_logprobs == logprobs
    for top, row in zip(choice.logprobs.top_logprobs, rows):
        # keyed by spelling, as OpenAI's shape is: byte tokens that spell alike collapse
        best = sorted(row.tolist(), reverse=True)[:3]
        assert max(top.values()) == best[0] and set(top.values()) <= set(best)


def test_chat_streams_a_role_then_the_same_tokens_as_whole(server):
    api = client(server)
    messages = [{"role": "user", "content": "hi"}]
    whole = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=6,
                                        extra_body=NO_STOP)
    chunks = list(api.chat.completions.create(model=MODEL, messages=messages, max_tokens=6,
                                              stream=True, extra_body=NO_STOP))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == \
        whole.choices[0].message.content
    assert [t for c in chunks for t in c.choices[0].token_ids] == whole.choices[0].token_ids
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)  # no usage unless asked for
    prompt_ids = list(chat_prompt(MODEL, messages))  # the zoo's byte chat template
    assert whole.choices[0].token_ids == oracle_greedy(MODEL, prompt_ids, 6)[0]


def test_usage_comes_last_and_alone_when_asked_for(server):
    chunks = list(client(server).completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=4, stream=True,
        stream_options={"include_usage": True}, extra_body=NO_STOP))
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 4
    assert chunks[-1].usage.prompt_tokens == len(PROMPT)
    assert all(c.usage is None for c in chunks[:-1])


def test_n_and_list_prompts_give_every_choice_its_own_row(server):
    prompts = [PROMPT, [7, 8, 9]]
    reply = client(server).completions.create(model=MODEL, prompt=prompts, n=2, max_tokens=5,
                                              extra_body=NO_STOP)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    for c in reply.choices:
        assert c.token_ids == oracle_greedy(MODEL, prompts[c.index // 2], 5)[0]
    assert reply.usage.completion_tokens == 20
    assert reply.usage.prompt_tokens == len(PROMPT) + 3


def test_a_stop_string_ends_the_text_before_it_even_across_tokens(server):
    api = client(server)
    whole = api.completions.create(model=MODEL, prompt="hello", max_tokens=12,
                                   extra_body=NO_STOP).choices[0]
    text = whole.text
    stop = next(text[i:i + 2] for i in range(1, len(text) - 1)
                if text[i:i + 2].isprintable() and text.find(text[i:i + 2]) == i)
    cut = text.index(stop)
    for stream in (False, True):
        reply = api.completions.create(model=MODEL, prompt="hello", max_tokens=12, stop=[stop],
                                       stream=stream, extra_body=NO_STOP)
        if stream:
            chunks = list(reply)
            got = "".join(c.choices[0].text for c in chunks)
            finish = chunks[-1].choices[0].finish_reason
        else:
            got, finish = reply.choices[0].text, reply.choices[0].finish_reason
        assert (got, finish) == (text[:cut], "stop")


def test_a_stop_token_like_eos_ends_the_row_and_adds_no_text(server):
    api = client(server)
    greedy = oracle_greedy(MODEL, PROMPT, 6)[0]
    stopped = api.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6,
                                     extra_body={"stop_token_ids": [greedy[2]]}).choices[0]
    before = api.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2,
                                    extra_body=NO_STOP).choices[0]
    assert stopped.token_ids == greedy[:3] and stopped.finish_reason == "stop"
    assert stopped.text == before.text  # the stop token's own text is not sent


def test_models_and_model_by_id(server):
    api = client(server)
    assert [m.id for m in api.models.list().data] == [MODEL]
    assert api.models.retrieve(MODEL).id == MODEL
    with pytest.raises(Exception, match="does not exist"):
        api.models.retrieve("gpt-4")


def test_an_api_key_is_required_when_set():
    import openai

    with live_server(api_key="sekret") as server:
        assert client(server, api_key="sekret").models.list().data[0].id == MODEL
        with pytest.raises(openai.AuthenticationError) as err:
            client(server, api_key="wrong").completions.create(model=MODEL, prompt="a")
        assert err.value.body["type"] == "authentication_error"


def test_chat_logprobs_are_mlx_lms_and_n_streams_each_choice_apart(server):
    api = client(server)
    messages = [{"role": "user", "content": "hi"}]
    prompt_ids = list(chat_prompt(MODEL, messages))
    reply = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=5,
                                        logprobs=True, top_logprobs=2, extra_body=NO_STOP)
    tokens, logprobs, _ = oracle_greedy(MODEL, prompt_ids, 5)
    content = reply.choices[0].logprobs.content
    assert [c.logprob for c in content] == logprobs
    assert all(len(c.top_logprobs) == 2 and c.top_logprobs[0].logprob >= c.logprob
               for c in content)
    chunks = list(api.completions.create(model=MODEL, prompt=PROMPT, n=3, max_tokens=4,
                                         stream=True, temperature=1.0, seed=11,
                                         extra_body=NO_STOP))
    streamed = {i: [t for c in chunks for t in c.choices[0].token_ids if c.choices[0].index == i]
                for i in range(3)}
    whole = api.completions.create(model=MODEL, prompt=PROMPT, n=3, max_tokens=4,
                                   temperature=1.0, seed=11, extra_body=NO_STOP)
    assert streamed == {c.index: c.token_ids for c in whole.choices}
    assert len({tuple(v) for v in streamed.values()}) > 1  # seed + j: the choices differ
