"""(b) Batch invariance, vLLM's and SGLang's needle test.

The needle (the golden case of median prompt length, its golden's steps) is asked alone,
then in each trial among ``fillers`` concurrent requests of mixed prompt lengths and
``max_tokens`` (so rows join and leave while the needle decodes), sent from threads:
``trial mod (fillers + 1)`` of them first, then (50 ms later) the needle and the rest.
Every trial's needle must equal the alone answer bit for bit: tokens, each token's
logprob, and the alternatives (as sets of (id, logprob)); so must a second alone answer
after the trials.

Whether the needle really shared a batch is up to the threads' timing and the server's
scheduler. Where the server says so (``batchlab serve``: each choice's
``batchlab.peak_decode_rows``, the most rows of a decode step that emitted one of its
tokens), a trial whose needle decoded alone is sent again (``ALONE_RETRIES`` times), and a
check whose needle never shared a step is UNSUPPORTED: nothing was compared under
batching. Elsewhere the report counts the fillers in flight with the needle from the
client's side, which a server that serialises requests also shows.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from batchlab.http_gate.cases import fillers
from batchlab.http_gate.reply import Reply
from batchlab.http_gate.result import CheckResult
from batchlab.http_gate.session import Session
from batchlab.status import Status

TOP = 5
HEAD_START_S = 0.05  # how long the first fillers run before the needle is sent
ALONE_RETRIES = 3  # a trial sent again while the server says its needle decoded alone


def check_needle(s: Session, *, trials: int, num_fillers: int) -> CheckResult:
    # the median prompt: longer fillers pad it, shorter ones do not (the longest prompt
    # would never be padded in a batched prefill, where most servers' bits move)
    needle = sorted(s.cases, key=lambda c: len(c.prompt))[len(s.cases) // 2]
    top = TOP if s.has_logprobs else None
    alone = s.ask(needle.prompt, needle.text, len(needle.tokens), top=top, fresh=True)
    what = (f"needle {needle.cell_id} ({len(needle.prompt)} prompt tokens, "
            f"{len(needle.tokens)} steps) x {trials} trials among {num_fillers} fillers")
    overlaps, peaks = [], []
    for trial in range(trials):
        for _ in range(ALONE_RETRIES + 1):
            reply, overlap = _trial(s, needle, trial, num_fillers, top)
            if reply.peak_rows is None or reply.peak_rows > 1:
                break
        overlaps.append(overlap)
        peaks.append(reply.peak_rows)
        diff = difference(alone, reply)
        if diff:
            return CheckResult(check="needle", status=Status.FAIL, compared=what,
                               difference=f"trial {trial} (needle sent after "
                                          f"{trial % (num_fillers + 1)} fillers, {overlap} "
                                          f"in flight with it): {diff}")
    again = s.ask(needle.prompt, needle.text, len(needle.tokens), top=top, fresh=True)
    diff = difference(alone, again)
    if diff:
        return CheckResult(check="needle", status=Status.FAIL, compared=what,
                           difference=f"alone twice (after the trials): {diff}")
    logprobs = "tokens, logprobs and top-5" if top else "tokens (no logprobs served)"
    compared = f"{what}: {logprobs} bit-equal to alone; fillers in flight with the needle " \
               f"per trial {overlaps}"
    if None in peaks:
        return CheckResult(check="needle", status=Status.PASS,
                           compared=compared + " (the client's count: the server does not "
                                               "say whom the needle decoded beside)")
    compared += f"; the needle's largest decode batch per trial, as the server saw it {peaks}"
    if max(peaks) == 1:
        return CheckResult(check="needle", status=Status.UNSUPPORTED, compared=compared,
                           difference=f"the server decoded the needle alone in every trial "
                                      f"({ALONE_RETRIES + 1} tries each): batch invariance "
                                      f"was not tested; give the server a larger batch or "
                                      f"more --fillers")
    return CheckResult(check="needle", status=Status.PASS, compared=compared)


def _trial(s: Session, needle, trial: int, num_fillers: int, top) -> tuple[Reply, int]:
    others = fillers(num_fillers, trial, s.tokenizer)
    k = trial % (num_fillers + 1)
    spans: dict[int, tuple[float, float]] = {}

    gate = threading.Barrier(num_fillers + 1)

    def ask(index: int, ids, text, max_tokens):
        gate.wait()  # every thread is up: the first k fillers go at once
        if index < 0 or index >= k:
            time.sleep(HEAD_START_S)  # the needle joins a running batch, the rest after it
        start = time.monotonic()
        reply = s.ask(ids, text, max_tokens, top=top, fresh=True)
        spans[index] = (start, time.monotonic())
        return reply

    with ThreadPoolExecutor(max_workers=num_fillers + 1) as pool:
        futures = [pool.submit(ask, i, *f) for i, f in enumerate(others[:k])]
        mine = pool.submit(ask, -1, needle.prompt, needle.text, len(needle.tokens))
        futures += [pool.submit(ask, k + i, *f) for i, f in enumerate(others[k:])]
        reply = mine.result()
        for f in futures:
            f.result()  # a filler without a good answer is a ServerError: ERROR
    start, end = spans[-1]
    overlap = sum(1 for i, (a, b) in spans.items() if i >= 0 and a < end and b > start)
    return reply, overlap


def difference(alone: Reply, other: Reply) -> str:
    """The first step where ``other`` differs from ``alone`` (or "")."""
    a, b = alone.tokens or alone.named or (), other.tokens or other.named or ()
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b):
            return f"{len(b)} tokens, alone {len(a)}"
        if a[i] != b[i]:
            return f"step {i}: token {b[i]}, alone {a[i]}"
        for name, x, y in (("logprob", alone.logprobs, other.logprobs),
                           ("top", alone.top, other.top)):
            x_i = None if x is None or i >= len(x) else x[i]
            y_i = None if y is None or i >= len(y) else y[i]
            if name == "top" and x_i is not None and y_i is not None:
                x_i, y_i = sorted(x_i, key=repr), sorted(y_i, key=repr)
            if x_i != y_i:
                return f"step {i} (token {a[i]}): {name} {y_i!r}, alone {x_i!r}"
    if alone.finish_reason != other.finish_reason:
        return f"finish_reason {other.finish_reason!r}, alone {alone.finish_reason!r}"
    return ""
