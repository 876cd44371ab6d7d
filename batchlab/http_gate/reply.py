"""One completion as a record, whatever dialect the server answered in.

Where a server names tokens, by field, in the order this reads them:

    choices[0].token_ids                       batchlab serve; vLLM with return_token_ids
    logprobs.tokens = ["token_id:N", ...]      OpenAI's completions shape, under vLLM's
                                               return_tokens_as_token_ids
    logprobs.content = [{"id": N, ...}]        mlx_lm.server (both routes)
    logprobs.content = [{"token": "token_id:N"}]  OpenAI's chat shape under that flag

``tokens`` are the ids the choice says it generated (``token_ids`` where the server gives
them, else the ids its logprob entries name); ``named`` the ids its logprob entries name
(the consistency check holds the two equal). A top-logprob entry named only by its text
has id None: texts collide (every lone UTF-8 continuation byte spells U+FFFD).
"""

from __future__ import annotations

from dataclasses import dataclass

from batchlab.http_gate.wire import ServerError

TOKEN_ID = "token_id:"

Top = tuple[tuple[int | None, float], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    text: str
    finish_reason: str | None
    token_ids: tuple[int, ...] | None  # the choice's own list of ids, where it has one
    named: tuple[int | None, ...] | None  # the ids its logprob entries name
    logprobs: tuple[float, ...] | None  # the logprob reported for each token
    top: tuple[Top, ...] | None  # per token, the alternatives as (id, logprob)
    prompt_tokens: int | None
    completion_tokens: int | None
    # the most rows of a decode step the choice's row was in, where the server says so
    # (``batchlab serve``'s ``choices[0].batchlab.peak_decode_rows``); None elsewhere
    peak_rows: int | None = None

    @property
    def tokens(self) -> tuple[int, ...] | None:
        if self.token_ids is not None:
            return self.token_ids
        if self.named is not None and None not in self.named:
            return self.named
        return None


def parse_reply(body: dict, where: str) -> Reply:
    """A non-streamed /v1/completions answer with one choice."""
    choice = _one_choice(body, where)
    named, logprobs, top = _logprobs(choice.get("logprobs"), where)
    usage = body.get("usage") or {}
    return Reply(text=_text(choice, where), finish_reason=choice.get("finish_reason"),
                 token_ids=_ids(choice.get("token_ids"), f"{where}: token_ids"),
                 named=named, logprobs=logprobs, top=top,
                 prompt_tokens=usage.get("prompt_tokens"),
                 completion_tokens=usage.get("completion_tokens"),
                 peak_rows=_peak_rows(choice.get("batchlab"), where))


def _peak_rows(extension, where: str) -> int | None:
    """``batchlab.peak_decode_rows`` of a choice: a positive integer, or None if absent."""
    if extension is None:
        return None
    peak = extension.get("peak_decode_rows") if isinstance(extension, dict) else None
    if type(peak) is not int or peak < 1:
        raise ServerError(f"{where}: choices[0].batchlab.peak_decode_rows is not a positive "
                          f"integer: {str(extension)[:200]}")
    return peak


def parse_stream(events: list[dict], where: str) -> Reply:
    """A streamed answer: its chunks' text, ids and logprobs joined in order; the last
    finish_reason; usage from the chunk that carries it (``include_usage``)."""
    text, finish, usage = [], None, {}
    ids: list[int] | None = None  # None: no chunk carried the part
    named: list | None = None
    logprobs: list | None = None
    top: list | None = None
    for event in events:
        if event.get("usage"):
            usage = event["usage"]
        if not event.get("choices"):
            continue
        choice = _one_choice(event, where)
        text.append(_text(choice, where))
        finish = choice.get("finish_reason") or finish
        # a chunk without a part (the finish chunk, say) adds nothing to it
        part_ids = _ids(choice.get("token_ids"), f"{where}: token_ids")
        if part_ids is not None:
            ids = (ids or []) + list(part_ids)
        n, lp, t = _logprobs(choice.get("logprobs"), where)
        named = named if n is None else (named or []) + list(n)
        logprobs = logprobs if lp is None else (logprobs or []) + list(lp)
        top = top if t is None else (top or []) + list(t)
    return Reply(text="".join(text), finish_reason=finish,
                 token_ids=None if ids is None else tuple(ids),
                 named=_tuple(named), logprobs=_tuple(logprobs), top=_tuple(top),
                 prompt_tokens=usage.get("prompt_tokens"),
                 completion_tokens=usage.get("completion_tokens"))


def _tuple(values):
    return None if values is None else tuple(values)


def _one_choice(body: dict, where: str) -> dict:
    choices = body.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise ServerError(f"{where}: expected one choice, got {str(choices)[:200]}")
    return choices[0]


def _text(choice: dict, where: str) -> str:
    text = choice.get("text", "")
    if text is None:
        return ""
    if not isinstance(text, str):
        raise ServerError(f"{where}: choices[0].text is {type(text).__name__}, not a string")
    return text


def _ids(value, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise ServerError(f"{where} is not a list of integers: {str(value)[:200]}")
    return tuple(value)


def token_id(entry, where: str) -> int | None:
    """The id a logprob entry names: ``id``, or ``token_id:N`` as its token; else None."""
    if isinstance(entry, dict):
        if type(entry.get("id")) is int:
            return entry["id"]
        entry = entry.get("token")
    if isinstance(entry, str) and entry.startswith(TOKEN_ID):
        try:
            return int(entry[len(TOKEN_ID):])
        except ValueError:
            raise ServerError(f"{where}: {entry!r} is not token_id:<integer>") from None
    return None


def _number(value, where: str) -> float:
    if type(value) not in (int, float):
        raise ServerError(f"{where}: a logprob is {value!r}, not a number")
    return float(value)


def _logprobs(lp, where: str):
    """(named ids, logprobs, top) of a choice's ``logprobs`` (each None where absent)."""
    if lp is None:
        return None, None, None
    if not isinstance(lp, dict):
        raise ServerError(f"{where}: logprobs is {str(lp)[:200]}, not an object")
    if isinstance(lp.get("content"), list):  # OpenAI's chat shape, mlx_lm.server's
        entries = lp["content"]
        if not all(isinstance(e, dict) and e for e in entries):
            raise ServerError(f"{where}: a logprobs.content entry is empty or not an object")
        named = tuple(token_id(e, where) for e in entries)
        values = tuple(_number(e.get("logprob"), where) for e in entries)
        tops = [e.get("top_logprobs") for e in entries]
        top = None if all(not t for t in tops) else tuple(
            tuple((token_id(a, where), _number(a.get("logprob"), where)) for a in t or ())
            for t in tops)
        return named, values, top
    if isinstance(lp.get("tokens"), list):  # OpenAI's completions shape
        named = tuple(token_id(t, where) for t in lp["tokens"])
        values = tuple(_number(v, where) for v in lp.get("token_logprobs") or ())
        if len(values) != len(named):
            raise ServerError(f"{where}: {len(named)} logprobs.tokens but {len(values)} "
                              "token_logprobs")
        tops = lp.get("top_logprobs")
        top = None if not tops else tuple(
            tuple((token_id(k, where), _number(v, where)) for k, v in (t or {}).items())
            for t in tops)
        return named, values, top
    raise ServerError(f"{where}: logprobs has neither content nor tokens: {str(lp)[:200]}")
