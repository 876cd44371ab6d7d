"""The bug table of reports/gate/outside-tester-r4/README.md, from bugs.py's REGIME and the
measurement's JSON lines (measure-before.jsonl: the default matrix before round 4's
cells; closed.jsonl: each missed bug against its new cells, --all).

    python -m tools.tester4.table
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.tester4.bugs import BUGS, EQUIVALENT, REGIME

DIR = Path("reports/gate/outside-tester-r4")


def rows(path: Path) -> dict[str, dict]:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            d = json.loads(line)
            out[d["bug"]] = d
    return out


def main() -> None:
    res, closed = rows(DIR / "measure-before.jsonl"), rows(DIR / "closed.jsonl")
    print("| # | bug | regime | the change | proof cell | default matrix (before r4's cells) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, name in enumerate(BUGS, 1):
        regime, diff = REGIME[name]
        d = res.get(name)
        if d is None:
            verdict, proof = "not measured", ""
        elif d["caught"]:
            proof = "its catching cell (right)"
            verdict = f"caught: {d['status']} `{d['cell']}` ({d['cells_run']} cells run)"
        else:
            found = closed.get(name, {}).get("cells", [])
            cells = [c.split(":")[0].split(" ", 1)[1] for c in found]
            proof = (f"tools/tester4/proof.toml (`{cells[0]}` and the rest of its block)"
                     if cells else "tools/tester4/proof.toml")
            verdict = (f"**MISSED** (all {d['cells_run']} cells PASS); closed by "
                       f"{len(cells)} new cells" + (f", e.g. `{cells[0]}`" if cells else ""))
        print(f"| {i} | `{name}` | {regime} | {diff} | {proof} | {verdict} |")
    print()
    print("| bug | regime | the change | why it is equivalent (dropped) |")
    print("| --- | --- | --- | --- |")
    for name, (_, why) in EQUIVALENT.items():
        regime, diff = REGIME[name]
        print(f"| `{name}` | {regime} | {diff} | {why} |")
    caught = sum(res[n]["caught"] for n in BUGS if n in res)
    print(f"\n<!-- {caught}/{len(BUGS)} caught before -->")


if __name__ == "__main__":
    main()
