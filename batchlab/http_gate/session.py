"""What every check of one run shares: the server, its dialect, the cases, the tokenizer,
and the answers already had (the same request is asked once per run)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from batchlab.http_gate.cases import Case
from batchlab.http_gate.dialect import ROUTE, Dialect
from batchlab.http_gate.reply import Reply, parse_reply, parse_stream
from batchlab.http_gate.wire import Api


@dataclass(kw_only=True)
class Session:
    api: Api
    dialect: Dialect
    cases: list[Case]
    eos_ids: frozenset[int]
    tokenizer: object | None
    _answers: dict = field(default_factory=dict)

    @property
    def has_logprobs(self) -> bool:
        return self.dialect.logprobs_as != "none"

    def ask(self, ids, text: str | None, max_tokens: int, *, top: int | None,
            stream: bool = False, stop: list[str] | None = None, fresh: bool = False) -> Reply:
        """The server's answer to a greedy completion (``fresh``: ask again even if this
        request was answered before)."""
        body = self.dialect.body(ids, text, max_tokens, top=top, stream=stream, stop=stop)
        key = json.dumps(body, sort_keys=True)
        if not fresh and key in self._answers:
            return self._answers[key]
        where = f"POST {ROUTE} ({len(ids)}-token prompt{', streamed' if stream else ''})"
        if stream:
            reply = parse_stream(self.api.stream(ROUTE, body), where)
        else:
            reply = parse_reply(self.api.post(ROUTE, body), where)
        if not fresh:  # a fresh answer (the needle's, in a crowd) is not a lone one
            self._answers[key] = reply
        return reply

    def case_reply(self, case: Case, *, top: int | None, stream: bool = False) -> Reply:
        return self.ask(case.prompt, case.text, len(case.tokens), top=top, stream=stream)
