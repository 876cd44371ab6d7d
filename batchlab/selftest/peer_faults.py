"""Seeded faults of a process peer: the runner must make them ERROR for the one cell the
peer was running, start a fresh peer and go on (``subjects/process.py``). Only a peer
can play them (``batchlab selftest --engine 'process:...'``); the self-test's peer
(``selftest/peer.py``) does, at the first ``step`` of the cell named in
``BATCHLAB_PEER_FAULT_CELL`` (the bug's first candidate; the others must PASS).

The injectors patch nothing in this process: the fault lives in the peer's.
"""

from __future__ import annotations

import os
import time

from batchlab.selftest.inject import Patch

FAULT_CELL = "BATCHLAB_PEER_FAULT_CELL"


def crash() -> list[Patch]:
    """The peer process exits (code 3) in the middle of a cell, at its first step."""
    return []


def hang() -> list[Patch]:
    """The peer stops answering in the middle of a cell (it sleeps an hour at its first
    step); the runner gives up after --timeout."""
    return []


def out_of_protocol() -> list[Patch]:
    """The peer answers a step with a line that is not JSON (its engine printed to
    stdout, the protocol's channel)."""
    return []


FAULTS = {"peer-crash-mid-cell": crash, "peer-hangs": hang,
          "peer-out-of-protocol": out_of_protocol}


def play(fault: str, out) -> bool:
    """Play ``fault`` now; True when the request must get no proper answer."""
    if fault == "peer-crash-mid-cell":
        os._exit(3)
    if fault == "peer-hangs":
        time.sleep(3600)
    out.write("step 3 of 8 done\n")
    out.flush()
    return True
