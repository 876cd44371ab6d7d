"""Refusals: a subject turning one bad request down while its other rows run on.

A refusal cell (``[[cell]] refuse = [...]``, docs/subjects.md) sends every request raw,
as the wire carries it, through ``submit``; each request it expects refused must be
refused with the kind it names (``invalid``, ``unsupported``, ``capacity``), never judged
by the message's text, only by its having one that says something. The rows it expects
to run must be taken and stay bit-exact against their golden:

    submit {"name": "X", "prompt": [1, 2], "max_tokens": 0}   -> Refused("invalid", ...)
    submit {"name": "A", ...} while A is in flight            -> Refused("invalid", ...)
    submit {"name": "C", "sampling": {"temperature": 0.0}}    -> inserted, runs
"""

from __future__ import annotations

from batchlab.engine.paths.registry import Unsupported
from batchlab.subjects.protocol import Refused

MIN_WORDS = 3  # "None" or "" is no message: a refusal says what was wrong


class RefusalMismatch(Exception):
    """A refusal cell's request got another answer than the cell expects: FAIL."""


def refusal_of(err: Exception) -> Refused | None:
    """How batchlab's engine refuses: its records check themselves on construction
    (ValueError, TypeError for an unknown field), ``Scheduler.insert`` refuses a name in
    flight, a path raises ``Unsupported``, the paged pool ``OutOfBlocks``. None: a crash."""
    from batchlab.engine.paths.paged.block_manager import OutOfBlocks

    if isinstance(err, Refused):
        return err
    if isinstance(err, Unsupported):  # before ValueError: Unsupported is one
        return Refused("unsupported", str(err))
    if isinstance(err, OutOfBlocks):
        return Refused("capacity", str(err))
    if isinstance(err, KeyError):
        return Refused("invalid", f"the request has no {err}; a row needs name, prompt and "
                       "max_tokens (docs/wire-protocol.md, ROW)")
    if isinstance(err, (TypeError, ValueError)):
        return Refused("invalid", str(err))
    return None


def submit_row(subject, row: dict) -> None:
    """``submit`` for an in-process subject whose ``insert`` validates: the raw request's
    records are built here, after the cell started, so their checks run in the subject."""
    from batchlab.subjects.wire import row_of

    try:
        subject.insert([row_of(row)])
    except Exception as err:
        refused = refusal_of(err)
        if refused is None:
            raise
        raise refused from err


def judge_answer(subject, row: dict, expect: str | None) -> None:
    """Submit ``row``; ``expect`` is the refusal kind the cell wants (None: it must run).
    Raises ``RefusalMismatch`` when the answer differs."""
    name = row.get("name", "?")
    try:
        subject.submit(row)
    except Refused as err:
        if expect is None:
            raise RefusalMismatch(f"the subject refused valid request {name!r} "
                                  f"({err.kind}: {err.message})") from err
        if err.kind != expect:
            raise RefusalMismatch(f"request {name!r} was refused as {err.kind!r}, "
                                  f"expected {expect!r} ({err.message})") from err
        if len(err.message.split()) < MIN_WORDS:
            raise RefusalMismatch(f"request {name!r} was refused ({err.kind}) with "
                                  f"message {err.message!r}, which says nothing; a refusal "
                                  "says what to change") from err
        return
    if expect is not None:
        raise RefusalMismatch(f"the subject accepted request {name!r}, which it "
                              f"must refuse ({expect}): {row}")
