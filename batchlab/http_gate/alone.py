"""(a) Each request alone against its B=1 golden.

Per case (a B=1 greedy cell of matrices/http.toml), a completion of the golden's prompt
ids (or their exact text) with ``max_tokens`` = the golden's steps and temperature 0:

- tokens: every step's id equals the golden's (a server that stops early must stop at a
  golden EOS, reported or not);
- logprobs, where the server returns them: the chosen token's logprob equals the golden's
  exactly (float equality: JSON carries a bf16 / f32 value exactly, so the same backend
  and dtype must give the same number);
- top-5: a second request with 5 alternatives; each alternative the server names by id
  has the golden's value (an id outside the golden's top-5 only as a tie with its 5th),
  and the five values are the golden's. Alternatives named only by text are not compared
  (said so).
"""

from __future__ import annotations

from batchlab.http_gate.cases import Case
from batchlab.http_gate.reply import Reply, Top
from batchlab.http_gate.result import CheckResult
from batchlab.http_gate.session import Session
from batchlab.http_gate.wire import ServerError
from batchlab.status import Status

TOP = 5


def check_alone(s: Session) -> CheckResult:
    """Every case is asked; the difference reports the first token, logprob and top-5
    difference apart (tokens equal with logprobs off by an ulp is another finding than a
    wrong token)."""
    tokens = logprobs = tops = 0
    unnamed = False
    first: dict[str, str] = {}
    for case in s.cases:
        reply = s.case_reply(case, top=0 if s.has_logprobs else None)
        n, diff = token_difference(case, reply, s.eos_ids)
        if diff:
            first.setdefault("token", diff)
        tokens += n
        if reply.logprobs is not None:
            n = min(n, len(reply.logprobs))  # a length mismatch is consistency's FAIL
            for i in range(n):
                if reply.logprobs[i] != case.logprobs[i]:
                    first.setdefault("logprob", f"{case.cell_id}, step {i}: logprob "
                                     f"{reply.logprobs[i]!r} of token {case.tokens[i]}, "
                                     f"golden {case.logprobs[i]!r}")
                    break
            logprobs += n
        if not s.has_logprobs:
            continue
        alternatives = s.case_reply(case, top=TOP)
        for i, top in enumerate((alternatives.top or ())[:n]):
            if all(t is None for t, _ in top):
                unnamed = True
                continue
            diff = top_difference(top, case.top[i])
            if diff:
                first.setdefault("top", f"{case.cell_id}, step {i}: top-{TOP} {diff}")
                break
            tops += 1
    what = (f"{len(s.cases)} golden cases, {tokens} tokens, {logprobs} logprobs, {tops} "
            f"top-{TOP} lists, exact")
    if unnamed:
        what += "; alternatives named by text only were not compared"
    what += f" ({s.dialect.why})"
    if not first:
        return CheckResult(check="alone", status=Status.PASS, compared=what)
    if "token" not in first:
        first["token"] = f"none: all {tokens} tokens equal the golden's"
    difference = "; ".join(f"first {kind} difference: {first[kind]}"
                           for kind in ("token", "logprob", "top") if kind in first)
    return CheckResult(check="alone", status=Status.FAIL, compared=what, difference=difference)


def token_difference(case: Case, reply: Reply, eos_ids) -> tuple[int, str]:
    """(steps compared, the first difference or "")."""
    got = reply.tokens
    if got is None:
        raise_no_ids()
    want = case.tokens
    n = min(len(got), len(want))
    for i in range(n):
        if got[i] != want[i]:
            return i, f"{case.cell_id}, step {i}: token {got[i]}, golden {want[i]}"
    if len(got) > len(want):
        return n, f"{case.cell_id}: {len(got)} tokens for max_tokens {len(want)}"
    if len(got) < len(want):
        at_eos = want[n] in eos_ids or (n and got[-1] in eos_ids)
        if not at_eos:
            return n, (f"{case.cell_id}: stopped after {n} tokens ({reply.finish_reason}); "
                       f"golden step {n} is {want[n]}, not an EOS")
    return n, ""


def raise_no_ids():
    raise ServerError("the server names no token ids (neither token_ids nor ids in its "
                      "logprobs): nothing to compare with the golden")


def top_difference(top: Top, golden: tuple[tuple[int, float], ...]) -> str:
    want = dict(golden)
    cutoff = min(want.values())
    if sorted((v for _, v in top), reverse=True) != sorted(want.values(), reverse=True):
        return f"values {sorted((v for _, v in top), reverse=True)}, golden {list(want.values())}"
    for token, value in top:
        if token is None:
            continue
        if token in want and want[token] != value:
            return f"token {token} at {value!r}, golden {want[token]!r}"
        if token not in want and value != cutoff:
            return f"token {token} ({value!r}) is not in the golden's {list(want)}"
    return ""
