"""Does the default matrix catch a bug? The one driver of the outside testers' rounds
(tools/tester, tools/tester3, tools/tester4): the cells in one process with the bug
applied, the bug's hint fragments first, then batchlab/gate/killers.py's ranking, then
the rest; stop at the first FAIL / ERROR (the order is for speed only: a miss means every
cell passed).

    python -m tools.tester4.measure BUG [BUG...] [--out FILE] [--matrix M] [--goldens G]
        [--filter PAT] [--live] [--all]

A round's ``measure.py`` calls ``main(bugs_module, prog, hints)``. Its bugs module holds
``BUGS`` (name -> a function that applies the patch and returns an undo, or an object
with ``apply`` and ``hint``) and optionally ``EQUIVALENT`` (name -> (apply, reason)) and
``HINTS`` (name -> cell-id fragments to try first). ``clean`` runs with no patch.

Each bug runs in its own subprocess, so per-process caches (compiled traces, loaded
models) never carry a bug into the next one; a process that dies in a cell reports that
cell as caught (the runner's worker would report it ERROR).
"""

from __future__ import annotations

import argparse
import importlib
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


def lookup(bugs_module: str, name: str, hints: dict) -> tuple:
    """(apply, hint) of bug ``name`` in ``bugs_module`` (``clean``: no patch)."""
    if name == "clean":
        return (lambda: (lambda: None)), ()
    mod = importlib.import_module(bugs_module)
    bug = getattr(mod, "BUGS", {}).get(name)
    if bug is None:
        equivalent = getattr(mod, "EQUIVALENT", {})
        if name not in equivalent:
            raise SystemExit(f"no bug {name!r} in {bugs_module}")
        bug = equivalent[name][0]
    apply = getattr(bug, "apply", bug)
    hint = tuple(getattr(bug, "hint", ())) or tuple({**getattr(mod, "HINTS", {}),
                                                     **hints}.get(name, ()))
    return apply, hint


def run_one(bugs_module: str, name: str, matrix: str, goldens: str, only: str | None,
            live: bool = False, stop: bool = True, hints: dict | None = None) -> dict:
    from batchlab.cells.select import select
    from batchlab.cells.spec import load_matrix
    from batchlab.matrix.evaluate import Reference, evaluate_cell

    apply, hint = lookup(bugs_module, name, hints or {})
    cells = select(load_matrix(matrix), only, None)
    ref = Reference(matrix=matrix, goldens=Path(goldens), live=live)
    failed, passed = [], []
    undo = apply()
    start, ran = time.perf_counter(), 0
    try:
        for cell in ordered(cells, hint):
            print(f"CELL {cell.id}", file=sys.stderr, flush=True)  # a crash names its cell
            r = evaluate_cell(cell, ref)
            ran += 1
            status = r.status.value if hasattr(r.status, "value") else str(r.status)
            if status in CAUGHT and not stop:
                failed.append(f"{status} {cell.id}: {r.detail[:160]}")
            elif status in CAUGHT:
                return {"bug": name, "caught": True, "cell": cell.id, "status": status,
                        "detail": r.detail[:300], "cells_run": ran,
                        "seconds": round(time.perf_counter() - start, 1)}
            else:
                passed.append(f"{status} {cell.id}")
    finally:
        undo()
    out = {"bug": name, "caught": bool(failed), "cells_run": ran,
           "seconds": round(time.perf_counter() - start, 1)}
    if failed:
        out["cells"] = failed
    if not stop:
        out["passed"] = passed
    return out


def main(bugs_module: str, prog: str, hints: dict | None = None) -> None:
    ap = argparse.ArgumentParser(prog=prog)
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
        print(json.dumps(run_one(bugs_module, a.bugs[0], a.matrix, a.goldens, a.filter,
                                 live=a.live, stop=not a.all, hints=hints)), flush=True)
        return
    for name in a.bugs:
        cmd = [sys.executable, "-m", prog, name, "--inproc", "--matrix", a.matrix,
               "--goldens", a.goldens]
        if a.filter:
            cmd += ["--filter", a.filter]
        cmd += ["--live"] * a.live + ["--all"] * a.all
        out = subprocess.run(cmd, capture_output=True, text=True)
        lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
        if lines:
            res = json.loads(lines[-1])
        else:  # the process died in a cell: the runner's worker reports that cell ERROR
            at = [x[5:] for x in out.stderr.splitlines() if x.startswith("CELL ")]
            res = {"bug": name, "caught": bool(at), "cell": at[-1] if at else None,
                   "status": "ERROR (process crashed)", "cells_run": len(at),
                   "detail": out.stderr[-300:], "returncode": out.returncode}
        print(json.dumps(res), flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(res) + "\n")
