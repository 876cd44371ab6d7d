"""Golden files: one JSON per cell and backend, written atomically, read suspiciously.

    goldens/<backend-key>/<cell id with / as __>.json

A golden holds the oracle's trajectory (per row and emitted token: the step, the token,
a sha256 of the logprobs bytes and the top-k entries), the stamps that make it stale
when they change (mlx and mlx-lm versions, backend key, weights fingerprint, the cell's
definition) and a digest of its own content, so a truncated or hand-edited file is an
error, never a pass. Only oracle code calls ``write_golden``.

A golden whose steps carry full logprob vectors (the quantized-KV oracle's, for the KL
gate of cells that are not bit-exact) keeps them beside it, in
``<stem>.values.json`` (per row, the float32 bytes zlib-compressed and base64-encoded);
the golden holds their digest, so a sidecar that does not match is CORRUPT.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchlab.atomic import write_text_atomic
from batchlab.display import shown
from batchlab.trajectory import Step, Trajectory

FORMAT = 1


class GoldenError(Exception):
    """A golden that cannot be trusted. ``status`` is NO-GOLDEN, STALE or CORRUPT."""

    def __init__(self, status: str, path: Path, why: str, fix: str):
        self.status, self.path = status, path
        super().__init__(f"{status}: golden {shown(path)} {why}; fix: {fix}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stamp:
    """What a golden was made from. Any difference makes it stale."""

    cell_id: str
    definition_digest: str
    backend: str
    versions: dict
    fingerprint: str
    schedule: dict


@dataclass(frozen=True, slots=True, kw_only=True)
class Golden:
    stamp: Stamp
    oracle: str
    dtype: str
    serial_check: str  # "agrees", "oracle-bug" or "skipped: <why>"
    oracle_bug: dict | None
    trajectory: Trajectory | None  # None when batch mode crashed


def golden_path(root: Path, backend: str, file_stem: str) -> Path:
    return Path(root) / backend / f"{file_stem}.json"


def values_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json") + ".values.json")


def write_golden(path: Path, golden: Golden) -> None:
    payload = _payload(golden)
    values = _encoded_values(golden.trajectory)
    if values is not None:
        payload["values_digest"] = _content_digest(values)
        write_text_atomic(values_path(path), json.dumps(values, sort_keys=True) + "\n")
    payload["content_digest"] = _content_digest(payload)
    write_text_atomic(path, _render(payload))  # readers see the old file or the new one


def read_golden(path: Path, expected: Stamp, fix: str) -> Golden:
    """Load and verify a golden against what the current run would stamp on it."""
    if not path.is_file():
        raise GoldenError("NO-GOLDEN", path, "does not exist", fix)
    try:
        payload = json.loads(path.read_text())
        claimed = payload.pop("content_digest")
        golden = _from_payload(payload)
    except (ValueError, KeyError, TypeError, IndexError) as err:
        raise GoldenError("CORRUPT", path, f"cannot be parsed ({err})", fix) from None
    if claimed != _content_digest(payload):
        raise GoldenError("CORRUPT", path, "does not match its content digest "
                          "(truncated or edited by hand)", fix)
    stale = _stale_reason(golden.stamp, expected)
    if stale:
        raise GoldenError("STALE", path, stale, fix)
    if "values_digest" in payload:
        golden = _with_values(golden, path, payload["values_digest"], fix)
    return golden


def _encoded_values(trajectory: Trajectory | None) -> dict | None:
    """Per row, its steps' logprob vectors as one compressed float32 block; None
    unless every step has one."""
    if trajectory is None or not trajectory.rows:
        return None
    steps = [s for row in trajectory.rows.values() for s in row]
    if not steps or any(s.values is None for s in steps):
        return None
    return {name: base64.b64encode(zlib.compress(np.stack([s.values for s in row])
                                                 .astype(np.float32).tobytes())).decode()
            for name, row in trajectory.rows.items() if row}


def _with_values(golden: Golden, path: Path, digest: str, fix: str) -> Golden:
    side = values_path(path)
    try:
        encoded = json.loads(side.read_text())
    except (OSError, ValueError) as err:
        raise GoldenError("CORRUPT", side, f"cannot be read ({err})", fix) from None
    if _content_digest(encoded) != digest:
        raise GoldenError("CORRUPT", side, "does not match the digest its golden holds", fix)
    rows = {}
    for name, steps in golden.trajectory.rows.items():
        if not steps:
            rows[name] = steps
            continue
        flat = np.frombuffer(zlib.decompress(base64.b64decode(encoded[name])), np.float32)
        block = flat.reshape(len(steps), -1)
        rows[name] = tuple(Step(step=s.step, token=s.token, digest=s.digest, top=s.top,
                                values=block[i]) for i, s in enumerate(steps))
    trajectory = Trajectory(rows=rows, dtype=golden.trajectory.dtype)
    return Golden(stamp=golden.stamp, oracle=golden.oracle, dtype=golden.dtype,
                  serial_check=golden.serial_check, oracle_bug=golden.oracle_bug,
                  trajectory=trajectory)


def _stale_reason(have: Stamp, want: Stamp) -> str | None:
    if have.cell_id != want.cell_id:
        return f"is for cell {have.cell_id}, not {want.cell_id}"
    for lib, version in want.versions.items():
        if have.versions.get(lib) != version:
            return f"was made with {lib} {have.versions.get(lib)}, this run has {version}"
    checks = (
        ("backend", "backend"),
        ("fingerprint", "model weights (fingerprint)"),
        ("definition_digest", "cell definition (prompts, script, steps)"),
        ("schedule", "oracle schedule settings"),
    )
    for field, what in checks:
        if getattr(have, field) != getattr(want, field):
            return f"was made for another {what}: {getattr(have, field)} != {getattr(want, field)}"
    return None


def _payload(golden: Golden) -> dict:
    s = golden.stamp
    rows = None
    if golden.trajectory is not None:
        rows = {
            name: [[st.step, st.token, st.digest, [list(t) for t in st.top]] for st in steps]
            for name, steps in golden.trajectory.rows.items()
        }
    return {
        "format": FORMAT,
        "cell": s.cell_id,
        "definition_digest": s.definition_digest,
        "oracle": golden.oracle,
        "backend": s.backend,
        "versions": s.versions,
        "fingerprint": s.fingerprint,
        "schedule": s.schedule,
        "dtype": golden.dtype,
        "serial_check": golden.serial_check,
        "oracle_bug": golden.oracle_bug,
        "rows": rows,
    }


def _from_payload(p: dict) -> Golden:
    if p["format"] != FORMAT:
        raise ValueError(f"format {p['format']} is not {FORMAT}")
    trajectory = None
    if p["rows"] is not None:
        trajectory = Trajectory(
            rows={
                name: tuple(
                    Step(step=int(a), token=int(b), digest=str(c),
                         top=tuple((int(i), float(v)) for i, v in d))
                    for a, b, c, d in steps
                )
                for name, steps in p["rows"].items()
            },
            dtype=p["dtype"],
        )
    stamp = Stamp(cell_id=p["cell"], definition_digest=p["definition_digest"],
                  backend=p["backend"], versions=p["versions"], fingerprint=p["fingerprint"],
                  schedule=p["schedule"])
    return Golden(stamp=stamp, oracle=p["oracle"], dtype=p["dtype"],
                  serial_check=p["serial_check"], oracle_bug=p["oracle_bug"],
                  trajectory=trajectory)


def _content_digest(payload: dict) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _render(payload: dict) -> str:
    """Readable and diffable: the header indented, one line per emitted token."""
    if payload["rows"] is None:
        return json.dumps(payload, indent=2, sort_keys=True) + "\n"
    head = {k: v for k, v in payload.items() if k != "rows"}
    out = json.dumps(head, indent=2, sort_keys=True)[:-2] + ',\n  "rows": {\n'
    blocks = []
    for name, steps in payload["rows"].items():
        body = ",\n".join("      " + json.dumps(s, separators=(",", ":")) for s in steps)
        blocks.append(f"    {json.dumps(name)}: [\n{body}\n    ]")
    return out + ",\n".join(blocks) + "\n  }\n}\n"
