"""The reference peer: a real separate program that speaks the wire protocol.

    python -m batchlab.subjects.peer [--engine batchlab|mlx-lm|module:factory]
        live: JSON lines on stdin/stdout, step by step (``--engine 'process:...'``)
    python -m batchlab.subjects.peer --engine mlx-lm --scripts DIR --out DIR2
        offline: run every exported script in DIR, write one trajectory file each

It wraps an in-process subject (batchlab's engine by default, or mlx-lm's
BatchGenerator). Nothing but protocol lines goes to stdout: anything the engine prints
goes to stderr, which the runner keeps for its error messages.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from batchlab.engine.paths.registry import Unsupported
from batchlab.subjects.choose import subject_for
from batchlab.subjects.protocol import Refused
from batchlab.subjects.wire import PROTOCOL, logprobs_dict, row_of, setup_of


def answer(subject, message: dict) -> dict | None:
    """One request, one reply (None: ``bye``, the peer ends)."""
    op = message.get("op")
    if op == "hello":
        return {"ok": True, "protocol": PROTOCOL, "name": subject.name,
                "capabilities": subject.capabilities.as_dict()}
    if op == "open":
        return {"ok": True, "dtype": subject.open(setup_of(message["setup"]))}
    if op == "insert" and subject.capabilities.validates:
        try:  # a refused row is not inserted; the rows before it in the message are
            for row in message["rows"]:
                subject.submit(row)
        except Refused as err:
            return {"ok": False, "refused": {"kind": err.kind, "message": err.message}}
    elif op == "insert":
        subject.insert([row_of(r) for r in message["rows"]])
    elif op == "remove":
        subject.remove(list(message["rows"]), park=bool(message.get("park", False)))
    elif op == "step":
        emissions = [{"row": e.name, "token": int(e.token), "logprobs": logprobs_dict(e.logprobs)}
                     for e in subject.step()]
        return {"ok": True, "active": subject.num_active, "emissions": emissions}
    elif op == "close":
        subject.close()
        return {"ok": True}
    elif op == "bye":
        return None
    else:
        return {"ok": False, "error": f"unknown op {op!r}"}
    return {"ok": True, "active": subject.num_active}


def serve(subject, lines, out) -> None:
    for line in lines:
        if not line.strip():
            continue
        try:
            reply = answer(subject, json.loads(line))
        except Unsupported as err:
            reply = {"ok": False, "unsupported": str(err)}
        except Exception as err:  # noqa: BLE001 - the engine's crash is the cell's ERROR
            reply = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        if reply is None:
            return
        out.write(json.dumps(reply) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batchlab.subjects.peer",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="batchlab",
                        help="the in-process subject it wraps: batchlab, mlx-lm, module:factory")
    parser.add_argument("--scripts", type=Path, default=None,
                        help="offline: a folder written by `batchlab matrix export`")
    parser.add_argument("--out", type=Path, default=None,
                        help="offline: where the trajectory files go")
    parser.add_argument("--filter", default=None, help="offline: script ids containing this")
    parser.add_argument("--shard", default=None,
                        help="offline: I/N, every N-th script from the I-th (0-based)")
    args = parser.parse_args(argv)
    subject = subject_for(args.engine)
    if args.scripts is not None:
        from batchlab.subjects.files import play_scripts

        if args.out is None:
            parser.error("--scripts needs --out")
        shard = tuple(int(x) for x in args.shard.split("/")) if args.shard else (0, 1)
        done = play_scripts(subject, args.scripts, args.out, args.filter, log=sys.stderr,
                            shard=shard)
        print(f"{done} trajectories in {args.out}", file=sys.stderr)
        return 0
    out, sys.stdout = sys.stdout, sys.stderr  # the protocol owns stdout
    serve(subject, sys.stdin, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
