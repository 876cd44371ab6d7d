"""The self-test's process peer: batchlab's reference peer playing one seeded bug.

    BATCHLAB_PEER_BUG=NAME python -m batchlab.selftest.peer [--engine batchlab|mlx-lm]

``batchlab selftest --engine 'process:python -m batchlab.selftest.peer'`` starts it once
per bug with the bug's name in ``BATCHLAB_PEER_BUG`` (unset for the control): an engine
bug is patched into batchlab's engine inside this process, a subject bug wraps the
subject (``subject_bugs.py``), a peer fault is played at the first step of the cell
named in ``BATCHLAB_PEER_FAULT_CELL`` (``peer_faults.py``). Its ``hello`` lists what it
plays (``"plays"``), so the self-test knows which bugs reached the subject.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from batchlab.selftest.catalog import CATALOG
from batchlab.selftest.inject import applied
from batchlab.selftest.peer_faults import FAULT_CELL, FAULTS, play
from batchlab.selftest.subject_bugs import WRAPPERS, wrap
from batchlab.subjects.choose import subject_for
from batchlab.subjects.peer import answer

BUG = "BATCHLAB_PEER_BUG"


def plays(engine: str) -> list[str]:
    """Engine bugs patch batchlab's engine: only its subject runs them. Accounting bugs
    show only to the row-cost check of the harness's in-process subject: no peer plays them."""
    return [b.name for b in CATALOG if b.kind not in ("engine", "accounting")
            or (b.kind == "engine" and engine == "batchlab")]


def serve(subject, bug: str | None, fault_cell: str, engine: str, lines, out) -> None:
    armed = False
    for line in lines:
        if not line.strip():
            continue
        message = json.loads(line)
        op = message.get("op")
        if op == "open":
            armed = bug in FAULTS and message["setup"]["cell"] == fault_cell
        if armed and op == "step" and play(bug, out):
            continue
        try:
            reply = answer(subject, message)
        except Exception as err:  # noqa: BLE001 - the engine's crash is the cell's ERROR
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        if reply is None:
            return
        if op == "hello":
            reply["plays"] = plays(engine)
        out.write(json.dumps(reply) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batchlab.selftest.peer",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="batchlab", help="batchlab or mlx-lm")
    engine = parser.parse_args(argv).engine
    bug = os.environ.get(BUG) or None
    if bug is not None and bug not in plays(engine):
        sys.exit(f"{BUG}={bug!r}: this peer ({engine}) plays {', '.join(plays(engine))}")
    subject = subject_for(engine)
    if bug in WRAPPERS:
        subject = wrap(bug, subject)
    engine_bug = next((b for b in CATALOG if b.name == bug and b.kind == "engine"), None)
    out, sys.stdout = sys.stdout, sys.stderr  # the protocol owns stdout
    with applied(engine_bug.inject()) if engine_bug else contextlib.nullcontext():
        serve(subject, bug, os.environ.get(FAULT_CELL, ""), engine, sys.stdin, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
