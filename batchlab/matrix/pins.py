"""The gate's size, pinned: which cells the default matrix has, which are expected ORACLE-BUG.

A gate that loses cells, or whose goldens start marking other cells as oracle bugs, must
not pass silently. ``tests/parity/gate_pins.json`` holds the sorted cell ids of the matrix
and, per backend, the sorted ids of the cells whose golden carries the oracle's evidence
of its own bug; the parity tests fail on any difference. The pin is derived from the
matrix and the goldens the oracle wrote, never from an engine run: it decides no bits.

    python -m batchlab.matrix.pins            # compare the pin with matrix + goldens
    python -m batchlab.matrix.pins --write    # rewrite it (after adding cells or regen)

``--write`` rewrites the cell ids and this backend's oracle-bug ids; other backends'
entries are kept. Review the diff of the pin file like any other change to the gate.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from batchlab.atomic import write_text_atomic
from batchlab.display import shown

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_PINS = PROJECT_ROOT / "tests" / "parity" / "gate_pins.json"
WRITE_COMMAND = "python -m batchlab.matrix.pins --write"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pins:
    matrix: str
    cell_ids: tuple[str, ...]  # sorted
    oracle_bug: dict[str, tuple[str, ...]]  # backend key -> sorted cell ids

    def to_json(self) -> str:
        body = {"matrix": self.matrix, "cells": len(self.cell_ids),
                "cell_ids": list(self.cell_ids),
                "oracle_bug": {k: list(v) for k, v in sorted(self.oracle_bug.items())}}
        return json.dumps(body, indent=1) + "\n"


def read_pins(path: Path = DEFAULT_PINS) -> Pins:
    try:
        body = json.loads(Path(path).read_text())
        pins = Pins(matrix=body["matrix"], cell_ids=tuple(body["cell_ids"]),
                    oracle_bug={k: tuple(v) for k, v in body["oracle_bug"].items()})
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"gate pins {shown(path)} cannot be read ({err}); rewrite them with "
                         f"`{WRITE_COMMAND}`") from None
    if body.get("cells") != len(pins.cell_ids):
        raise ValueError(f"gate pins {shown(path)}: 'cells' is {body.get('cells')} but "
                         f"{len(pins.cell_ids)} ids are listed; rewrite with `{WRITE_COMMAND}`")
    return pins


def current_pins(matrix: Path, goldens: Path, keep: Pins | None = None) -> Pins:
    """The pin the matrix and this backend's goldens give now (other backends from
    ``keep``). Every golden must be trustworthy: a missing or stale one raises."""
    from batchlab.backend import backend_key
    from batchlab.golden.check import has_golden, load_checked
    from batchlab.golden.store import GoldenError
    from batchlab.matrix.spec import load_matrix

    cells = load_matrix(matrix)
    bugs, problems = [], []
    for cell in filter(has_golden, cells):
        try:
            if load_checked(cell, goldens, shown(matrix)).oracle_bug:
                bugs.append(cell.id)
        except GoldenError as err:
            problems.append(str(err))
    if problems:
        raise ValueError(f"{len(problems)} goldens of {shown(matrix)} cannot be trusted, so "
                         f"no pin can be derived; first: {problems[0]}")
    oracle_bug = dict(keep.oracle_bug) if keep else {}
    oracle_bug[backend_key()] = tuple(sorted(bugs))
    return Pins(matrix=shown(matrix), cell_ids=tuple(sorted(c.id for c in cells)),
                oracle_bug=oracle_bug)


def differences(pinned: Pins, now: Pins, backend: str) -> list[str]:
    """What changed since the pin, one line per kind, ids listed; [] when equal."""
    out = []

    def diff(what: str, old, new) -> None:
        lost, added = sorted(set(old) - set(new)), sorted(set(new) - set(old))
        if lost:
            out.append(f"{what} no longer: {len(lost)}: {', '.join(lost)}")
        if added:
            out.append(f"{what} not pinned: {len(added)}: {', '.join(added)}")

    diff("cells", pinned.cell_ids, now.cell_ids)
    if backend not in pinned.oracle_bug:
        out.append(f"no oracle-bug pin for backend {backend}")
    diff(f"ORACLE-BUG cells on {backend}", pinned.oracle_bug.get(backend, ()),
         now.oracle_bug.get(backend, ()))
    return out


def main(argv: list[str] | None = None) -> int:
    from batchlab.backend import backend_key
    from batchlab.defaults import DEFAULT_GOLDENS, DEFAULT_MATRIX

    parser = argparse.ArgumentParser(prog="python -m batchlab.matrix.pins",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX)
    parser.add_argument("--goldens", type=Path, default=DEFAULT_GOLDENS)
    parser.add_argument("--pins", type=Path, default=DEFAULT_PINS)
    parser.add_argument("--write", action="store_true", help="rewrite the pin file")
    args = parser.parse_args(argv)
    old = read_pins(args.pins) if args.pins.is_file() else None
    now = current_pins(args.matrix, args.goldens, keep=old)
    backend = backend_key()
    changes = differences(old, now, backend) if old else ["no pin file yet"]
    for line in changes:
        print(line)
    if args.write:
        write_text_atomic(args.pins, now.to_json())
        print(f"wrote {shown(args.pins)}: {len(now.cell_ids)} cells, "
              f"{len(now.oracle_bug[backend])} ORACLE-BUG on {backend}")
        return 0
    if changes:
        print(f"the pin differs from {shown(args.matrix)} + goldens; if that is intended, "
              f"run `{WRITE_COMMAND}` and commit the file")
        return 1
    print(f"pin matches: {len(now.cell_ids)} cells, {len(now.oracle_bug[backend])} "
          f"ORACLE-BUG on {backend}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
