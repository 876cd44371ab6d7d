"""Every OpenAI field issue 29 names, sent by the official ``openai`` client, and what the
server answers (``test_openai_fields.py`` checks each; run as a script it writes the
record in reports/serve-openai-fields/):

    python tests/serve/openai_fields.py --out reports/serve-openai-fields

A case is its name, the route, the client's keyword arguments, and what it must get:
``ok`` (200) or the 400's ``param``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import openai

MODEL = "llama"
HI = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    name: str
    kwargs: dict
    expect: str  # "ok", or the param the 400 names
    chat: bool = True
    why: str = ""  # why the server answers so


@dataclass(slots=True, kw_only=True)
class Outcome:
    case: Case
    status: int
    got: str  # "ok" or the 400's param
    detail: str = ""  # the answer's text, or the error's message
    extra: dict = field(default_factory=dict)


def _chat(**kw) -> dict:
    return {"messages": HI, "max_tokens": 3, **kw}


def _extra(**kw) -> dict:
    return {"messages": HI, "max_tokens": 3, "extra_body": kw}


IGNORED = "accepted; the answer does not depend on it here"
CASES = [
    Case(name="store: true", kwargs=_chat(store=True), expect="ok", why=IGNORED + " (nothing "
         "is stored)"),
    Case(name="metadata", kwargs=_chat(metadata={"team": "a"}), expect="ok", why=IGNORED),
    Case(name="reasoning_effort: none", kwargs=_chat(reasoning_effort="none"), expect="ok",
         why="its no-op value"),
    Case(name="reasoning_effort: low", kwargs=_chat(reasoning_effort="low"),
         expect="reasoning_effort", why="the model's chat template does not read it"),
    Case(name="modalities: [text]", kwargs=_chat(modalities=["text"]), expect="ok",
         why="text is what is served"),
    Case(name="modalities: [text, audio]", kwargs=_chat(modalities=["text", "audio"]),
         expect="modalities", why="audio output is not served"),
    Case(name="service_tier: auto", kwargs=_chat(service_tier="auto"), expect="ok",
         why=IGNORED),
    Case(name="prediction", kwargs=_chat(prediction={"type": "content", "content": "hello"}),
         expect="ok", why=IGNORED + " (a latency hint)"),
    Case(name="verbosity: medium", kwargs=_chat(verbosity="medium"), expect="ok",
         why="its no-op value"),
    Case(name="verbosity: low", kwargs=_chat(verbosity="low"), expect="verbosity",
         why="the model's chat template does not read it"),
    Case(name="prompt_cache_key", kwargs=_chat(prompt_cache_key="user-7"), expect="ok",
         why=IGNORED + " (the prompt cache matches by prefix)"),
    Case(name="prompt_cache_retention: 24h", kwargs=_chat(prompt_cache_retention="24h"),
         expect="ok", why=IGNORED),
    Case(name="safety_identifier", kwargs=_chat(safety_identifier="u-7"), expect="ok",
         why="recorded in the access log, as user"),
    Case(name="audio: null", kwargs=_chat(audio=None), expect="ok", why="its no-op value"),
    Case(name="audio: {voice, format}", kwargs=_chat(audio={"voice": "alloy", "format": "wav"}),
         expect="audio", why="audio output is not served"),
    Case(name="web_search_options: {}", kwargs=_chat(web_search_options={}),
         expect="web_search_options", why="web search is not served"),
    Case(name="moderation", kwargs=_extra(moderation={"policy": {"input": {"mode": "score"}}}),
         expect="moderation", why="moderation is not run by this server"),
    Case(name="stream_options.include_obfuscation", kwargs=_chat(
        stream=True, stream_options={"include_usage": True, "include_obfuscation": False}),
        expect="ok", why=IGNORED),
    Case(name="assistant refusal: null, tool_calls: []", kwargs=_chat(messages=[
        *HI, {"role": "assistant", "content": "hello", "refusal": None, "tool_calls": []},
        {"role": "user", "content": "again"}]), expect="ok", why="their no-op values"),
    Case(name="assistant tool_calls: [call]", kwargs=_chat(messages=[
        *HI, {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]),
        expect="messages.1.tool_calls", why="tool calling is not served"),
    Case(name="tool message with tool_call_id", kwargs=_chat(messages=[
        *HI, {"role": "tool", "content": "42", "tool_call_id": "c1"}]), expect="ok",
        why="passed to the chat template"),
    Case(name="user image part", kwargs=_chat(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]),
        expect="messages.0.content.0", why="image input is not served"),
    Case(name="top_p: 0", kwargs=_chat(top_p=0, temperature=1.0), expect="ok",
         why="keeps the most likely token alone: served as greedy"),
    Case(name="top_k: -1", kwargs=_extra(top_k=-1, temperature=1.0, seed=3), expect="ok",
         why="vLLM's off"),
    Case(name="top_k: -2", kwargs=_extra(top_k=-2), expect="top_k", why="-1 or >= 0"),
    Case(name="top_k: 10**9", kwargs=_extra(top_k=10**9, temperature=1.0, seed=3),
         expect="ok", why="at least the vocabulary: keeps every token (off)"),
    Case(name="stop_token_ids: [999999]", kwargs=_extra(stop_token_ids=[999999]),
         expect="stop_token_ids", why="outside the vocabulary"),
    Case(name="logit_bias: {5: 1, 999999: 1}", kwargs=_chat(logit_bias={"5": 1, "999999": 1}),
         expect="logit_bias", why="999999 is outside the vocabulary (the error names it)"),
    Case(name="completions logprobs: 2 (text_offset)", chat=False, kwargs={
        "prompt": "hello", "max_tokens": 4, "logprobs": 2}, expect="ok",
        why="text_offset: each token's start in the tokens spelled one after another"),
]


def run_case(api: openai.OpenAI, case: Case) -> Outcome:
    kwargs = {"model": MODEL, **case.kwargs}
    create = api.chat.completions.create if case.chat else api.completions.create
    try:
        reply = create(**kwargs)
        if kwargs.get("stream"):
            chunks = list(reply)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return Outcome(case=case, status=200, got="ok", detail=repr(text))
        choice = reply.choices[0]
        if case.chat:
            return Outcome(case=case, status=200, got="ok", detail=repr(choice.message.content),
                           extra={"token_ids": choice.token_ids})
        return Outcome(case=case, status=200, got="ok", detail=repr(choice.text),
                       extra={"tokens": choice.logprobs.tokens,
                              "text_offset": choice.logprobs.text_offset})
    except openai.APIStatusError as err:
        error = err.body if isinstance(err.body, dict) else {}
        error = error.get("error", error)
        return Outcome(case=case, status=err.status_code, got=str(error.get("param")),
                       detail=str(error.get("message")))


def markdown(outcomes: list[Outcome]) -> str:
    lines = ["| field sent | HTTP | param | expected | why | answer or error |",
             "| --- | ---: | --- | --- | --- | --- |"]
    for o in outcomes:
        detail = o.detail.replace("|", "\\|")
        if o.extra.get("text_offset"):
            detail += f"; tokens {o.extra['tokens']}, text_offset {o.extra['text_offset']}"
        lines.append(f"| {o.case.name} | {o.status} | {o.got if o.status != 200 else ''} | "
                     f"{o.case.expect} | {o.case.why} | {detail} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    from serve_live import client, live_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("reports/serve-openai-fields"))
    args = parser.parse_args()
    with live_server(MODEL, max_batch=8) as server:
        outcomes = [run_case(client(server), case) for case in CASES]
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(outcomes)
    (args.out / "fields.md").write_text(
        f"openai {openai.__version__} against `batchlab serve --model {MODEL}`; "
        "written by `python tests/serve/openai_fields.py`\n\n" + table)
    (args.out / "fields.json").write_text(json.dumps(
        [{"field": o.case.name, "kwargs": o.case.kwargs, "status": o.status, "got": o.got,
          "expect": o.case.expect, "detail": o.detail, **o.extra} for o in outcomes],
        indent=1, default=str) + "\n")
    print(table)
    bad = [o.case.name for o in outcomes if o.got != o.case.expect]
    print(f"{len(outcomes) - len(bad)}/{len(outcomes)} as expected" + (f"; not: {bad}"
                                                                       if bad else ""))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    main()
