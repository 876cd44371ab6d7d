"""The bug table of reports/gate/outside-tester-r3/README.md, from bugs.py's REGIME and the
measurement's JSON lines (measure-before.jsonl, closed.jsonl).

    python -m tools.tester3.table
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.tester3.bugs import BUGS, EQUIVALENT, REGIME

DIR = Path("reports/gate/outside-tester-r3")


def rows(path: Path) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines():
        d = json.loads(line)
        out[d["bug"]] = d
    return out


def main() -> None:
    res, closed = rows(DIR / "measure-before.jsonl"), rows(DIR / "closed.jsonl")
    print("| # | bug | regime | the change | proof cell | default matrix (before r3's cells) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, name in enumerate(BUGS, 1):
        regime, diff = REGIME[name]
        d = res[name]
        if d["caught"]:
            proof = "its catching cell (right)"
            verdict = f"caught: {d['status']} `{d['cell']}` ({d['cells_run']} cells run)"
        else:
            cells = [c.split(":")[0].split(" ", 1)[1] for c in closed[name]["cells"]]
            proof = f"tools/tester3/proof.toml (`{cells[0]}` and the rest of its block)"
            verdict = (f"**MISSED** (all {d['cells_run']} cells PASS); closed by "
                       f"{len(cells)} new cells, e.g. `{cells[0]}`")
        print(f"| {i} | `{name}` | {regime} | {diff} | {proof} | {verdict} |")
    print()
    print("| bug | regime | the change | why it is equivalent (dropped) |")
    print("| --- | --- | --- | --- |")
    for name, (_, why) in EQUIVALENT.items():
        regime, diff = REGIME[name]
        print(f"| `{name}` | {regime} | {diff} | {why} |")
    caught = sum(res[n]["caught"] for n in BUGS)
    print(f"\n<!-- {caught}/{len(BUGS)} caught before -->")


if __name__ == "__main__":
    main()
