"""(c) What the server says about itself agrees with itself.

Per golden case, from the answers with no alternatives, with 5, and streamed:

- the ids the logprob entries name are the tokens returned (and the same with and
  without alternatives asked for);
- each reported logprob is its token's value among the alternatives, and under greedy
  the largest of them;
- usage: ``prompt_tokens`` is the prompt's length, ``completion_tokens`` the tokens
  returned;
- ``finish_reason`` is "length" when ``max_tokens`` tokens came back, else "stop";
- streamed equals non-streamed: text, finish_reason, usage, and ids and logprobs where
  the stream carries them;
- a stop string (a character from the middle of an answer's text) ends the answer
  before it: the text is the unstopped text up to the string's first occurrence, the
  string not included, finish_reason "stop"; streamed too.
"""

from __future__ import annotations

from batchlab.http_gate.alone import raise_no_ids
from batchlab.http_gate.cases import Case
from batchlab.http_gate.reply import Reply
from batchlab.http_gate.result import CheckResult
from batchlab.http_gate.session import Session
from batchlab.status import Status

TOP = 5


ASPECTS = ("usage", "ids", "logprob", "stream", "stop")


def check_consistency(s: Session) -> CheckResult:
    """Every aspect is checked on every case; the difference gives each aspect's first."""
    notes: list[str] = []
    first: dict[str, str] = {}
    for case in s.cases:
        for aspect, diff in _case_differences(s, case, notes):
            if diff:
                first.setdefault(aspect, f"{case.cell_id}: {diff}")
    diff = _stop_difference(s, notes)
    if diff:
        first["stop"] = diff
    compared = _compared(s) + "".join(f"; {n}" for n in dict.fromkeys(notes))
    if not first:
        return CheckResult(check="consistency", status=Status.PASS, compared=compared)
    return CheckResult(check="consistency", status=Status.FAIL, compared=compared,
                       difference="; ".join(f"{a}: {first[a]}" for a in ASPECTS if a in first))


def _compared(s: Session) -> str:
    return (f"{len(s.cases)} cases: usage and finish_reason, named ids, logprob in its "
            f"top-{TOP} and greedy max, stream = whole, stop string")


def _case_differences(s: Session, case: Case, notes: list[str]):
    """(aspect, first difference or "") of one case."""
    plain = s.case_reply(case, top=0 if s.has_logprobs else None)
    tokens = plain.tokens
    if tokens is None:
        raise_no_ids()  # nothing to hold the rest to: ERROR, as in alone
    yield "usage", _usage_and_finish(plain, len(case.prompt), len(case.tokens), tokens,
                                     s.eos_ids)
    if s.has_logprobs:
        if plain.named is not None and plain.named != tokens:
            yield "ids", _first(plain.named, tokens, "a logprob entry names", "token_ids has")
        if plain.logprobs is None or len(plain.logprobs) != len(tokens):
            yield "logprob", f"{len(tokens)} tokens but logprobs {plain.logprobs!r}"
        alt = s.case_reply(case, top=TOP)
        if alt.named is not None and alt.named != tokens:
            yield "ids", _first(alt.named, tokens, "with top_logprobs, a logprob entry names",
                                "without, the answer's token is")
        if alt.top is None:
            yield "logprob", f"asked for {TOP} alternatives, none came back"
        else:
            yield "logprob", _logprob_difference(tokens, alt)
    streamed = s.case_reply(case, top=0 if s.has_logprobs else None, stream=True)
    yield "stream", _stream_difference(plain, streamed, notes)


def _logprob_difference(tokens, alt: Reply) -> str:
    """Each token's reported logprob (from the answer with alternatives) is its value
    among them, and the largest (greedy)."""
    for i, (token, value, top) in enumerate(zip(tokens, alt.logprobs or (), alt.top)):
        named = dict(t for t in top if t[0] is not None)
        if named and named.get(token) != value:
            return (f"step {i}: the reported logprob {value!r} of token {token} is not "
                    f"its value among the alternatives {top}")
        if top and value != max(v for _, v in top):
            return (f"step {i}: greedy took token {token} at {value!r}, but an "
                    f"alternative is likelier: {max(top, key=lambda t: t[1])}")
    return ""


def _usage_and_finish(reply: Reply, prompt: int, max_tokens: int, tokens, eos_ids) -> str:
    if reply.prompt_tokens != prompt:
        return f"usage.prompt_tokens {reply.prompt_tokens}, the prompt has {prompt}"
    if reply.completion_tokens != len(tokens):
        return f"usage.completion_tokens {reply.completion_tokens}, {len(tokens)} tokens came back"
    want = {"stop"} if len(tokens) < max_tokens else {"length"}
    if tokens and tokens[-1] in eos_ids:
        want.add("stop")  # an EOS at the last step may say either
    if reply.finish_reason not in want:
        return (f"finish_reason {reply.finish_reason!r} after {len(tokens)} of max_tokens "
                f"{max_tokens}, expected {' or '.join(map(repr, sorted(want)))}")
    return ""


def _first(got, want, got_says: str, want_says: str) -> str:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"step {i}: {got_says} {a}, {want_says} {b}"
    return f"{got_says} {len(got)} tokens, {want_says} {len(want)}"


def _stream_difference(whole: Reply, streamed: Reply, notes: list[str]) -> str:
    for name in ("text", "finish_reason", "prompt_tokens", "completion_tokens"):
        a, b = getattr(whole, name), getattr(streamed, name)
        if a != b:
            return f"streamed {name} {b!r}, not streamed {a!r}"
    if streamed.tokens is None:
        notes.append("the stream names no token ids (text compared)")
    elif streamed.tokens != whole.tokens:
        return _first(streamed.tokens, whole.tokens, "streamed token", "not streamed")
    if whole.logprobs is not None:
        if streamed.logprobs is None:
            notes.append("the stream carries no logprobs though asked (text compared)")
        elif streamed.logprobs != whole.logprobs:
            return _first(streamed.logprobs, whole.logprobs, "streamed logprob", "not streamed")
    return ""


def _stop_difference(s: Session, notes: list[str]) -> str:
    """Stop at the first alphanumeric ASCII character of an answer past its start that did
    not occur before."""
    for case in s.cases:
        whole = s.case_reply(case, top=None)
        text = whole.text
        at = next((i for i, ch in enumerate(text)
                   if i > 0 and ch.isascii() and ch.isalnum() and ch not in text[:i]), None)
        if at is None:
            continue
        stop = text[at]
        for stream in (False, True):
            reply = s.ask(case.prompt, case.text, len(case.tokens), top=None, stream=stream,
                          stop=[stop])
            how = "streamed" if stream else "not streamed"
            if reply.text != text[:at] or reply.finish_reason != "stop":
                return (f"{case.cell_id}: stop {stop!r} ({how}): text {reply.text!r} "
                        f"({reply.finish_reason}), expected {text[:at]!r} (stop)")
        notes.append(f"stop {stop!r} honoured in {case.cell_id}")
        return ""
    notes.append("no answer had an ASCII character to stop at: stop not checked")
    return ""
