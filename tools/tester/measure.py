"""Does the default matrix catch a bug? Run its cells in one process with the bug applied,
fastest-first, and stop at the first FAIL / ERROR (tools/tester/bugs.py has the bugs).

    python -m tools.tester.measure BUG [BUG...] [--out FILE] [--matrix M --goldens G]

Order: the cells matching the bug's hint fragments, then batchlab/gate/killers.py's
ranking, then the rest (ordering is for speed only: a miss means every cell passed).
Each bug runs in its own subprocess, so per-process caches (compiled traces, blocked
models, loaded zoo models patched through) never carry a bug into the next one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CAUGHT = {"FAIL", "ERROR"}


def ordered(cells, hint):
    from batchlab.gate.killers import CELL_PRIORITY

    def key(cell):
        for i, frag in enumerate(hint):
            if frag in cell.id:
                return (0, i)
        for i, frag in enumerate(CELL_PRIORITY):
            if frag in cell.id:
                return (1, i)
        return (2, 0)

    return sorted(cells, key=key)


def run_one(name: str, matrix: str, goldens: str, only: str | None,
            live: bool = False, stop: bool = True) -> dict:
    from batchlab.cells.select import select
    from batchlab.cells.spec import load_matrix
    from batchlab.matrix.evaluate import Reference, evaluate_cell
    from tools.tester.bugs import BUGS

    bug = BUGS[name]
    cells = select(load_matrix(matrix), only, None)
    ref = Reference(matrix=matrix, goldens=Path(goldens), live=live)
    failed = []
    undo = bug.apply()
    start, ran = time.perf_counter(), 0
    try:
        for cell in ordered(cells, bug.hint):
            r = evaluate_cell(cell, ref)
            ran += 1
            status = r.status.value if hasattr(r.status, "value") else str(r.status)
            if status in CAUGHT and not stop:
                failed.append(f"{status} {cell.id}")
            elif status in CAUGHT:
                return {"bug": name, "caught": True, "cell": cell.id, "status": status,
                        "detail": r.detail[:300], "cells_run": ran,
                        "seconds": round(time.perf_counter() - start, 1)}
    finally:
        undo()
    if failed:
        return {"bug": name, "caught": True, "cells": failed, "cells_run": ran}
    return {"bug": name, "caught": False, "cell": None, "cells_run": ran,
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bugs", nargs="+")
    ap.add_argument("--out", default=None)
    ap.add_argument("--matrix", default="matrices/default.toml")
    ap.add_argument("--goldens", default=None)
    ap.add_argument("--filter", default=None)
    ap.add_argument("--inproc", action="store_true")
    ap.add_argument("--live", action="store_true", help="the oracle in-process, not goldens")
    ap.add_argument("--all", action="store_true", help="run every cell, list every catch")
    a = ap.parse_args()
    if a.goldens is None:
        from batchlab.defaults import DEFAULT_GOLDENS
        a.goldens = str(DEFAULT_GOLDENS)
    if a.inproc:
        print(json.dumps(run_one(a.bugs[0], a.matrix, a.goldens, a.filter,
                                 live=a.live, stop=not a.all)), flush=True)
        return
    for name in a.bugs:
        cmd = [sys.executable, "-m", "tools.tester.measure", name, "--inproc",
               "--matrix", a.matrix, "--goldens", a.goldens]
        if a.filter:
            cmd += ["--filter", a.filter]
        cmd += ["--live"] * a.live + ["--all"] * a.all
        out = subprocess.run(cmd, capture_output=True, text=True)
        lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
        res = json.loads(lines[-1]) if lines else {"bug": name, "crash": out.stderr[-800:]}
        print(json.dumps(res), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
