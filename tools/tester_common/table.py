"""The bug table of an outside tester's round (reports/gate/outside-tester-rN/README.md),
from its bugs.py's REGIME and the measurement's JSON lines (measure-before.jsonl: the
default matrix before the round's cells; closed.jsonl: each missed bug against its new
cells, --all). Each round's ``table.py`` calls ``print_table`` with its own bugs module.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType


def rows(path: Path) -> dict[str, dict]:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            d = json.loads(line)
            out[d["bug"]] = d
    return out


def print_table(round_no: int, bugs: ModuleType) -> None:
    report, proofs = Path(f"reports/gate/outside-tester-r{round_no}"), f"tools/tester{round_no}"
    res, closed = rows(report / "measure-before.jsonl"), rows(report / "closed.jsonl")
    print(f"| # | bug | regime | the change | proof cell | default matrix (before r{round_no}'s "
          "cells) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, name in enumerate(bugs.BUGS, 1):
        regime, diff = bugs.REGIME[name]
        d = res.get(name)
        if d is None:
            verdict, proof = "not measured", ""
        elif d["caught"]:
            proof = "its catching cell (right)"
            verdict = f"caught: {d['status']} `{d['cell']}` ({d['cells_run']} cells run)"
        else:
            found = closed.get(name, {}).get("cells", [])
            cells = [c.split(":")[0].split(" ", 1)[1] for c in found]
            proof = (f"{proofs}/proof.toml (`{cells[0]}` and the rest of its block)"
                     if cells else f"{proofs}/proof.toml")
            verdict = (f"**MISSED** (all {d['cells_run']} cells PASS); closed by "
                       f"{len(cells)} new cells" + (f", e.g. `{cells[0]}`" if cells else ""))
        print(f"| {i} | `{name}` | {regime} | {diff} | {proof} | {verdict} |")
    print()
    print("| bug | regime | the change | why it is equivalent (dropped) |")
    print("| --- | --- | --- | --- |")
    for name, (_, why) in bugs.EQUIVALENT.items():
        regime, diff = bugs.REGIME[name]
        print(f"| `{name}` | {regime} | {diff} | {why} |")
    caught = sum(res[n]["caught"] for n in bugs.BUGS if n in res)
    print(f"\n<!-- {caught}/{len(bugs.BUGS)} caught before -->")
