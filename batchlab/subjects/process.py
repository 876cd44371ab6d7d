"""``--engine 'process:CMD ...'``: a subject in another process, any language, spoken to
step by step in JSON lines over its stdin/stdout (``docs/wire-protocol.md``).

    runner -> peer   {"op": "hello", "protocol": "batchlab-subject/1"}
    peer -> runner   {"ok": true, "protocol": "batchlab-subject/1", "name": ...,
                      "capabilities": {...}}
    runner -> peer   {"op": "open", "setup": {...}}        -> {"ok": true, "dtype": "bfloat16"}
                     {"op": "insert", "rows": [...]}       -> {"ok": true, "active": 3}
                     {"op": "remove", "rows": ["A"], "park": false} -> {"ok": true, "active": 2}
                     {"op": "step"}                        -> {"ok": true, "active": 2,
                                            "emissions": [{"row", "token", "logprobs"}]}
                     {"op": "close"}                       -> {"ok": true}

A peer that dies, answers nothing within ``timeout`` seconds, or answers out of protocol
raises ``SubjectError``: ERROR for the cell it was running; the peer is ended and the
next cell starts a fresh one. ``{"ok": false, "unsupported": why}`` to ``open`` is the
cell's UNSUPPORTED; ``{"ok": false, "error": text}`` is the engine's own crash (ERROR).
A peer that declares ``"validates": true`` may answer an ``insert`` with ``{"ok": false,
"refused": {"kind": "invalid", "message": ...}}``: the row is not inserted, the others run
on (``Refused``; a refusal cell sends each request it judges in an insert of its own).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import tempfile
import time

from batchlab.engine.paths.registry import Unsupported
from batchlab.subjects.protocol import (
    REFUSAL_KINDS,
    Capabilities,
    Emission,
    Refused,
    RowRequest,
    Setup,
    SubjectError,
)
from batchlab.subjects.wire import PROTOCOL, logprobs_of, row_dict, setup_dict

DEFAULT_TIMEOUT = 120.0  # seconds for one answer (a long prefill included)
START_TIMEOUT = 300.0  # at least this for 'hello' and 'open': imports, a model load


class PeerError(RuntimeError):
    """The peer's engine raised (``{"ok": false, "error": ...}``): the peer itself is fine."""


class ProcessSubject:
    def __init__(self, argv: list[str], timeout: float | None = None):
        env_timeout = os.environ.get("BATCHLAB_SUBJECT_TIMEOUT")  # `matrix run --timeout`
        self.argv = argv
        self.timeout = timeout or (float(env_timeout) if env_timeout else DEFAULT_TIMEOUT)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the peer
        self._buffer = b""
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, bufsize=0)
        hello = self._call({"op": "hello", "protocol": PROTOCOL}, expect=("protocol",))
        if hello["protocol"] != PROTOCOL:
            self._broken(f"speaks {hello['protocol']!r}; the runner speaks {PROTOCOL!r}")
        self.name = f"process:{hello.get('name') or argv[0]}"
        self.plays = tuple(hello.get("plays") or ())  # seeded bugs it plays (self-test)
        try:
            self.capabilities = Capabilities.from_dict(hello.get("capabilities") or {})
        except (TypeError, ValueError) as err:
            self._broken(f"sent capabilities the runner cannot read: {err}")
        self._active = 0

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- the protocol ------------------------------------------------------------------
    def open(self, setup: Setup) -> str:
        from batchlab.zoo.load import resolve

        if not setup.model_dir:  # a peer outside batchlab loads the directory mlx-lm reads
            setup = Setup(**{**{f: getattr(setup, f) for f in Setup.__dataclass_fields__},
                             "model_dir": str(resolve(setup.model))})
        reply = self._call({"op": "open", "setup": setup_dict(setup)}, expect=("dtype",))
        self._active = 0
        return str(reply["dtype"])

    def insert(self, rows: list[RowRequest]) -> None:
        self._active = self._count(self._call({"op": "insert",
                                               "rows": [row_dict(r) for r in rows]}))

    def submit(self, row: dict) -> None:
        """One raw request in an insert of its own; a ``refused`` answer raises ``Refused``."""
        self._active = self._count(self._call({"op": "insert", "rows": [row]}))

    def remove(self, names: list[str], park: bool = False) -> None:
        self._active = self._count(self._call({"op": "remove", "rows": names, "park": park}))

    def step(self) -> list[Emission]:
        reply = self._call({"op": "step"}, expect=("emissions",))
        self._active = self._count(reply)
        try:
            return [Emission(name=str(e["row"]), token=int(e["token"]),
                             logprobs=logprobs_of(e["logprobs"])) for e in reply["emissions"]]
        except (KeyError, TypeError, ValueError) as err:
            self._broken(f"sent an emission the runner cannot read ({type(err).__name__}: "
                         f"{err}); each is {{\"row\", \"token\", \"logprobs\": {{\"dtype\", "
                         "\"b64\"}}")

    @property
    def num_active(self) -> int:
        return self._active

    def close(self) -> None:
        if self.alive:  # after a break the peer is already gone: nothing to close
            with contextlib.suppress(SubjectError, PeerError):
                self._call({"op": "close"})

    def shutdown(self) -> None:
        if self.alive:
            with contextlib.suppress(OSError):
                self.proc.stdin.write(b'{"op": "bye"}\n')
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # -- one exchange ------------------------------------------------------------------
    def _count(self, reply: dict) -> int:
        active = reply.get("active")
        if not isinstance(active, int) or active < 0:
            self._broken(f"answered without a row count ('active': int >= 0): {reply!r:.200}")
        return active

    def _call(self, message: dict, expect: tuple[str, ...] = ()) -> dict:
        op = message["op"]
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
        except OSError:
            self._broken(f"could not be sent '{op}' (its stdin is closed)")
        line = self._read_line(op)
        try:
            reply = json.loads(line)
        except ValueError:
            self._broken(f"answered '{op}' out of protocol (not one JSON object per line): "
                         f"{line[:200]!r}")
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            self._broken(f"answered '{op}' out of protocol (no \"ok\": true/false): "
                         f"{line[:200]!r}")
        if not reply["ok"]:
            if "unsupported" in reply and op == "open":
                why = str(reply["unsupported"])
                raise Unsupported(f"{self.name}: {why}", reason=why)
            if "refused" in reply and op == "insert":
                self._refused(reply["refused"], line)
            raise PeerError(f"the peer's engine failed on '{op}': {reply.get('error', reply)}")
        missing = [k for k in expect if k not in reply]
        if missing:
            self._broken(f"answered '{op}' without {', '.join(missing)}: {line[:200]!r}")
        return reply

    def _refused(self, refusal, line: bytes):
        kind = refusal.get("kind") if isinstance(refusal, dict) else None
        if kind not in REFUSAL_KINDS:
            self._broken(f"refused an insert without a known kind ({', '.join(REFUSAL_KINDS)}):"
                         f" {line[:200]!r}")
        raise Refused(kind, str(refusal.get("message", "")))

    def _read_line(self, op: str) -> bytes:
        allowed = max(self.timeout, START_TIMEOUT) if op in ("hello", "open") else self.timeout
        deadline = time.monotonic() + allowed
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    self._broken(f"gave no answer to '{op}' within {allowed:g} s (hung?)")
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self.proc.wait()
                    self._broken(f"exited (code {self.proc.returncode}) before answering "
                                 f"'{op}'")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _broken(self, what: str):
        """End the peer (the next cell starts a fresh one) and raise for this cell."""
        if self.alive:
            self.proc.kill()
            self.proc.wait()
        self._buffer = b""
        self._stderr.seek(0)
        tail = self._stderr.read()[-1500:].decode(errors="replace").strip()
        raise SubjectError(f"subject process {' '.join(self.argv)!r} {what}"
                           + (f"; its stderr ends: {tail}" if tail else ""))
