"""Does the default matrix catch a bug? tools/tester/measure.py's approach for the bugs of
tools/tester3/bugs.py: the cells in one process with the bug applied, the bug's hint
fragments first, then batchlab/gate/killers.py's ranking, then the rest; stop at the
first FAIL / ERROR (the order is for speed only: a miss means every cell passed).

    python -m tools.tester3.measure BUG [BUG...] [--out FILE] [--matrix M] [--goldens G]
        [--filter PAT] [--live] [--all]

Each bug runs in its own subprocess, so per-process caches (compiled traces, loaded
models) never carry a bug into the next one. ``--bug none`` style clean runs: pass
``clean`` as the bug name (no patch).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

CAUGHT = {"FAIL", "ERROR"}

# cell-id fragments to try first, per bug (speed only)
HINTS: dict[str, tuple[str, ...]] = {
    "cap-counted-before-finish": ("steps3_pb4_cb2", "steps1_pb4_cb2"),
    "admit-ignores-prompt-batch": ("/B3/ragged/staggered/ctx-wrap/ps8", "pb2"),
    "joiners-longest-first": ("/B4/ragged/static/ctx-short/t",),
    "finished-history-after-filter": ("/explicit/finish-continue/",),
    "cache-tokens-drop-emitted": ("/explicit/finish-continue/",),
    "decode-mask-memo-by-shape": ("/B34/ragged/trickle/",),
    "ring-extend-ignores-rotated": ("late-join", "@w"),
    "ring-filter-trims-padding": ("gemma3/B3/ragged/evict/", "gemma3/B8/ragged/evict-many"),
    "ring-prefill-keeps-window": ("gemma3/B3/ragged/static/ctx-wrap/ps8",),
    "ring-chunk-no-padding-roll": ("gemma3/B3/ragged/static/ctx-wrap/ps8",),
    "ring-merge-offset-is-size": ("l1/gemma3/B3/ragged/history/ctx-wrap",),
    "state-advance-skips-lengths": ("mamba2/B3/ragged/static/ctx-wrap/ps8",),
    "state-merge-zeros-float32": ("l1/mamba2/B3/ragged/prefix-join/", "mamba2/B3/ragged/history"),
    "state-filter-keeps-padding-rows": ("l1/mamba2/B3/ragged/join-evict/ctx-short",),
    "min-p-on-scaled": ("m0.1_r4",),
    "presence-counts-each-sighting": ("lp-",),
    "processor-context-no-history": ("/explicit/resume-one/", "/explicit/finish-continue/"),
    "processor-context-whole-prompt": ("lp-",),
    "row-samplers-grouped": ("rs-",),
    "compiled-offset-first-row": ("compiled/llama/B4/ragged/join-evict/ctx-wrap",),
    "paged-hash-unchained": ("/explicit/prefix-share/",),
    "paged-extend-aligns-only-both-written": ("paged/llama/B4/ragged/join-evict/ctx-wrap",),
    "window-view-one-wider": ("invariant/gemma3/",),
    "qkv-switch-before-first-forward": ("kv8/llama-hd64/",),
    "compiled-shapeless-trace": ("compiled/llama/B4/ragged/join-evict/ctx-wrap",),
    "cache-tokens-prefilling-off-by-one": ("/explicit/park-prefilling-lp/",),
    "sample-only-surviving-rows": ("/B4/ragged/join-evict/ctx-short/t1_r1",),
    "tapconv-model-dtype": ("invariant-blocked/mamba2/", "invariant-blocked/qwen3.5/"),
    "paged-skip-ignores-chunk-count": ("explicit/prefix-share/ctx-explicit/steps10_pb2",),
}


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
    from tools.tester3.bugs import BUGS, EQUIVALENT

    cells = select(load_matrix(matrix), only, None)
    ref = Reference(matrix=matrix, goldens=Path(goldens), live=live)
    failed, passed = [], []
    apply = BUGS.get(name) or EQUIVALENT[name][0]
    undo = (lambda: None) if name == "clean" else apply()
    start, ran = time.perf_counter(), 0
    try:
        for cell in ordered(cells, HINTS.get(name, ())):
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
        cmd = [sys.executable, "-m", "tools.tester3.measure", name, "--inproc",
               "--matrix", a.matrix, "--goldens", a.goldens]
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


if __name__ == "__main__":
    main()
