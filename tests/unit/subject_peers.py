"""Broken subjects for tests/unit/test_subjects.py: seeded bugs the gate must catch.

    python tests/unit/subject_peers.py MODE SUBSTR
        a process peer: batchlab's reference peer, except on cells whose id contains
        SUBSTR, where MODE happens at the first step: crash (exit 3), garbage (a line that
        is not JSON), hang (no answer), wrong-token (row B's 3rd token + 1)
    subject_peers:wrong_token  (module:factory) the same wrong-token bug, in-process
    subject_peers:no_history   (module:factory) batchlab's engine declaring no history
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

from batchlab.subjects.engine import BatchlabSubject


class WrongToken(BatchlabSubject):
    """Row B's third emitted token is reported one higher: a bookkeeping bug."""

    name = "wrong-token"

    def open(self, setup):
        self.seen_b = 0
        return super().open(setup)

    def step(self):
        out = []
        for e in super().step():
            if e.name == "B":
                self.seen_b += 1
                if self.seen_b == 3:
                    e = replace(e, token=e.token + 1)
            out.append(e)
        return out


def wrong_token() -> WrongToken:
    return WrongToken()


def main(mode: str, on: str) -> None:
    from batchlab.subjects.peer import answer

    subject = WrongToken() if mode == "wrong-token" else BatchlabSubject()
    out, sys.stdout = sys.stdout, sys.stderr
    armed = False
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("op") == "open":
            armed = on in message["setup"]["cell"]
        if armed and message.get("op") == "step" and mode != "wrong-token":
            if mode == "crash":
                os._exit(3)
            if mode == "garbage":
                out.write("this is not a protocol line\n")
                out.flush()
                continue
            if mode == "hang":
                time.sleep(3600)
        try:
            reply = answer(subject, message)
        except Exception as err:  # noqa: BLE001
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        if reply is None:
            return
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])


def no_history() -> BatchlabSubject:
    """batchlab's engine declaring no history: its history cells are UNSUPPORTED."""
    from batchlab.subjects.protocol import Capabilities

    subject = BatchlabSubject()
    subject.capabilities = Capabilities(history=False)
    return subject
