"""The OpenAI fields real clients send (issue 29), through the official client: each is
served, accepted and ignored, or refused with a 400 naming it (``openai_fields.CASES``),
and the served ones mean what OpenAI (or vLLM) says they mean."""

from __future__ import annotations

from openai_fields import CASES, MODEL, run_case
from serve_live import client


def test_every_field_gets_its_answer(server):
    api = client(server)
    outcomes = [run_case(api, case) for case in CASES]
    assert [(o.case.name, o.got) for o in outcomes] == [(c.name, c.expect) for c in CASES]
    by_name = {o.case.name: o for o in outcomes}
    assert "token ids [999999] are outside" in by_name["logit_bias: {5: 1, 999999: 1}"].detail
    assert "[5," not in by_name["logit_bias: {5: 1, 999999: 1}"].detail  # only the bad id
    assert by_name["reasoning_effort: low"].detail.startswith(
        "reasoning_effort 'low' is not served: this model's chat template does not read")


def _chat_ids(api, **kw) -> list[int]:
    reply = api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                        max_tokens=8, **kw)
    return reply.choices[0].token_ids


def test_top_p_0_is_greedy_and_top_k_off_values_are_off(server):
    api = client(server)
    greedy = _chat_ids(api)
    sampled = _chat_ids(api, temperature=1.0, seed=3)
    assert _chat_ids(api, temperature=1.0, top_p=0, seed=3) == greedy != sampled
    for off in (-1, 0, 320, 10**9):  # 320: the vocabulary
        assert _chat_ids(api, temperature=1.0, seed=3, extra_body={"top_k": off}) == sampled
    assert _chat_ids(api, temperature=1.0, seed=3, extra_body={"top_k": 1}) == greedy


def test_completions_text_offset_counts_the_tokens_spellings(server):
    api = client(server)
    whole = api.completions.create(model=MODEL, prompt="hello", max_tokens=6, logprobs=1,
                                   extra_body={"stop_token_ids": []})
    chunks = list(api.completions.create(model=MODEL, prompt="hello", max_tokens=6,
                                         logprobs=1, stream=True,
                                         extra_body={"stop_token_ids": []}))
    lp = whole.choices[0].logprobs
    starts = [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert len(lp.tokens) == 6 and lp.text_offset == starts
    streamed = [o for c in chunks if c.choices and c.choices[0].logprobs
                for o in c.choices[0].logprobs.text_offset]
    assert streamed == starts  # continued across the chunks
