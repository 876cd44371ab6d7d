"""The gate's size, pinned: which cells the default matrix has, which are expected ORACLE-BUG.

A gate that loses cells, or whose goldens start marking other cells as oracle bugs, must
not pass silently. ``tests/parity/gate_pins.json`` holds the sorted cell ids of the matrix
and, per backend, the sorted ids of the cells whose golden carries the oracle's evidence
of its own bug; the parity tests fail on any difference. The pin is derived from the
matrix and the goldens the oracle wrote, never from an engine run: it decides no bits.

    batchlab golden pins            # compare the pin with matrix + goldens
    batchlab golden pins --write    # rewrite it (after adding cells or regen)

``--write`` rewrites the cell ids and this backend's oracle-bug ids; other backends'
entries are kept. Review the diff of the pin file like any other change to the gate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from batchlab.display import shown

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_PINS = PROJECT_ROOT / "tests" / "parity" / "gate_pins.json"
WRITE_COMMAND = "batchlab golden pins --write"


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
    from batchlab.cells.spec import load_matrix
    from batchlab.golden.check import has_golden, load_checked
    from batchlab.golden.store import GoldenError

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
