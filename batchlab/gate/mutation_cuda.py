"""The default matrix's own cells as the killers of CUDA-only mutants, on the GPU.

Round 4's ``mutation_gpu.py`` ran each mutant against a fixed slice of the CUDA matrices;
here the killers are cells of the matrix under test (the default matrix) chosen by what
they run, as the CPU campaign chooses by lines (gate/mutation_run.py):

1. **map**: the candidate cells (``--filter``) run on the clean mutants tree with
   ``--live`` (mlx-lm's batch mode on the same GPU is the reference), in ``--shards``
   processes, each cell under the shim's ``recording()``: per cell its clean status and
   the mutated functions it called. The kernel builders' caches are cleared before each
   cell, so a function that runs once per process while a kernel is built (the row
   prefill kernel's source) is recorded for every cell that uses the kernel, not only for
   a process's first;
2. **mutants**: each mutant in a fresh interpreter (a CUDA context does not survive a
   fork) with ``MUTANT_UNDER_TEST`` set before any import, against the cells that called
   its function and PASSed clean, cheapest first, until one ends otherwise (**killed**:
   another status, a Python exception, a crash of the process, or a cell past its time
   limit) or none is left (**survived**); **no cells** when no such cell exists;
   **capped** when its seconds ran out first.

A cell that fails clean cannot kill anything; the map lists those (a finding of the gate
on CUDA, reported apart). Results stream to JSONL files, so a call cut short keeps what
finished.

    python -m batchlab.gate.mutation_cuda --names gpu-names.txt --matrix M --filter F \\
        --live --shards 14 --parallel 14 --map-seconds 120 --seconds 330 --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CELL_FLOOR = 45.0  # seconds: the first cell of a process pays CUDA's kernel compilation
CELL_FACTOR = 10.0


def killers(stem: str, cells: dict[str, dict]) -> list[str]:
    """The cells that called ``stem`` and PASSed clean, cheapest first."""
    hit = [c for c, r in cells.items() if stem in r["functions"] and r["status"] == "PASS"]
    return sorted(hit, key=lambda c: (cells[c]["seconds"], c))


def _fresh_state() -> None:
    """Before each cell: forget the built kernels and uploaded spans, so the cell builds
    them again (and records the functions that build them), and undo the attention
    dispatch, so the cell's oracle runs mlx-lm's own helper unless its engine installs
    the dispatch (a worker of ``matrix run`` keeps it from cell to cell)."""
    import functools

    from batchlab.engine.kernels import row_attention, row_prefill

    for module in (row_attention, row_prefill):
        for value in vars(module).values():
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()
    row_prefill._SPANS.clear()
    # mlx-lm's helper back in its model modules: the next cell's install_dispatch makes
    # the dispatch closure again (make_dispatch runs once per process otherwise, and its
    # mutants live in the closure that every later cell calls)
    for name, module in list(sys.modules.items()):
        helper = getattr(module, "scaled_dot_product_attention", None)
        if name.startswith("mlx_lm.models.") and hasattr(helper, "original"):
            module.scaled_dot_product_attention = helper.original


def _evaluate(cell, ref, limit: float) -> tuple[str, str]:
    from batchlab.matrix.evaluate import evaluate_cell

    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        got = evaluate_cell(cell, ref)
        return str(got.status), got.detail
    except TimeoutError:
        return "TIMEOUT", f"past {limit:.0f} s"
    except Exception as err:  # noqa: BLE001 - a crash under a mutant is a kill
        return "CRASH", f"{type(err).__name__}: {err}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _alarm(signum, frame):
    raise TimeoutError


def _setup(matrix: str, live: bool):
    from batchlab.gate.mutation_shim import install

    install(force=True)  # before the engine: the mutants tree imports mutmut's trampoline
    signal.signal(signal.SIGALRM, _alarm)
    from batchlab.cells.spec import load_matrix
    from batchlab.matrix.evaluate import Reference

    cells = {c.id: c for c in load_matrix(Path(matrix))}
    return cells, Reference(matrix=matrix, goldens=Path("goldens"), live=live)


def map_shard(ids: list[str], matrix: str, live: bool, deadline: float, out: Path) -> None:
    """Run ``ids`` clean, one JSON line per cell: status, seconds, functions called."""
    from batchlab.gate.mutation_shim import recording

    cells, ref = _setup(matrix, live)
    with out.open("a") as sink:
        for i, cid in enumerate(ids):
            if time.time() > deadline and i:  # a shard's first cell always runs
                sink.write(json.dumps({"cell": cid, "status": "not run (deadline)"}) + "\n")
                continue
            _fresh_state()
            start = time.perf_counter()
            with recording() as called:
                status, detail = _evaluate(cells[cid], ref, CELL_FLOOR)
            sink.write(json.dumps({"cell": cid, "status": status, "detail": detail[:400],
                                   "seconds": round(time.perf_counter() - start, 2),
                                   "functions": sorted(called)}) + "\n")
            sink.flush()


def mutant_child(name: str, ids: list[str], clean: dict, matrix: str, live: bool,
                 cap: float, out: Path) -> None:
    """Run ``ids`` with the mutant on (set in the environment by the parent), fail-fast;
    ``out`` names the cell being run while it runs, so a crash is blamed on it."""
    if os.environ.get("MUTANT_UNDER_TEST") != name:  # not gated: misuse
        raise ValueError(f"{name}: set MUTANT_UNDER_TEST before the interpreter starts")
    cells, ref = _setup(matrix, live)
    start, run = time.perf_counter(), 0
    for cid in ids:
        if time.perf_counter() - start > cap:
            out.write_text(json.dumps({"status": "capped", "cells_run": run,
                                       "cells": len(ids)}))
            return
        out.write_text(json.dumps({"status": "running", "by": cid, "cells_run": run,
                                   "cells": len(ids)}))
        limit = max(CELL_FLOOR, CELL_FACTOR * clean[cid]["seconds"])
        _fresh_state()  # as the map ran it
        status, detail = _evaluate(cells[cid], ref, limit)
        run += 1
        if status != clean[cid]["status"]:
            # past its time limit: reported apart (a first cell's kernel compilation on a
            # loaded machine can outlast it), judged by hand before it counts as a kill
            verdict = "timeout" if status == "TIMEOUT" else "killed"
            out.write_text(json.dumps({"status": verdict, "by": cid, "got": status,
                                       "expected": clean[cid]["status"], "cells_run": run,
                                       "cells": len(ids), "detail": detail[:300]}))
            return
    out.write_text(json.dumps({"status": "survived" if ids else "no cells",
                               "cells_run": run, "cells": len(ids)}))


def _env(args, mutant: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path.cwd()), os.environ.get("PYTHONPATH", "")]), PYTHONUNBUFFERED="1")
    env.pop("MUTANT_UNDER_TEST", None)
    if mutant:
        env["MUTANT_UNDER_TEST"] = mutant
    return env


def _log(path: Path):
    return path.open("w")  # the child's stderr: open while it runs


def _self(*argv: str) -> list[str]:
    return [sys.executable, "-c", "from batchlab.gate.mutation_cuda import main; main()", *argv]


def run_map(args, ids: list[str]) -> dict[str, dict]:
    deadline = time.time() + args.map_seconds
    parts = [args.work / f"map.{i}.jsonl" for i in range(args.shards)]
    procs = []
    for i, part in enumerate(parts):
        part.unlink(missing_ok=True)
        shard = ids[i::args.shards]  # ids come sorted by model: shards mix the models
        (args.work / f"map.{i}.ids").write_text("\n".join(shard))
        procs.append(subprocess.Popen(
            _self("--child-map", str(args.work / f"map.{i}.ids"), "--matrix", args.matrix,
                  "--deadline", str(deadline), "--out", str(part), *(["--live"] * args.live)),
            env=_env(args, None), stdout=subprocess.DEVNULL,
            stderr=_log(args.work / f"map.{i}.log")))
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline + CELL_FLOOR + 10 - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
    cells: dict[str, dict] = {}
    with (args.out / "map.jsonl").open("w") as sink:
        for part in parts:
            for line in part.read_text().splitlines() if part.exists() else ():
                row = json.loads(line)
                cells[row["cell"]] = row
                sink.write(line + "\n")
    ran = [c for c in cells.values() if "functions" in c]
    print(f"map: {len(ran)} of {len(ids)} cells ran clean:",
          {s: sum(c["status"] == s for c in ran) for s in {c["status"] for c in ran}},
          flush=True)
    return {c: r for c, r in cells.items() if "functions" in r}


def run_mutants(args, names: list[str], clean: dict[str, dict]) -> None:
    from batchlab.gate.mutation_shim import stem

    deadline = time.time() + args.seconds
    # no-cells verdicts at once, then the mutants with the most killers first: a survivor
    # runs all of them (up to the cap) while the quick kills fill the later slots
    queue = sorted(((n, killers(stem(n), clean)) for n in names), key=lambda q: -len(q[1]))
    queue.sort(key=lambda q: bool(q[1]))
    running: dict[str, tuple[subprocess.Popen, float, Path, list[str]]] = {}
    with (args.out / "mutants.jsonl").open("w") as sink:
        def finish(name: str, timed_out: bool) -> None:
            proc, started, part, ids = running.pop(name)
            row = json.loads(part.read_text()) if part.exists() else {"status": "error"}
            if row["status"] == "running":  # the process died or hung inside a cell
                row["status"] = "killed" if not timed_out else "timeout"
                row["got"] = "CRASH" if not timed_out else "HANG"
                how = "stopped by the parent" if timed_out else f"exit {proc.returncode}"
                row["detail"] = f"the process ended inside the cell ({how})"
            row.update(name=name, seconds=round(time.time() - started, 1), killers=len(ids))
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            print(row["status"], name, row.get("by", ""), row["seconds"], "s", flush=True)

        while queue or running:
            while queue and len(running) < args.parallel and time.time() < deadline:
                name, ids = queue.pop(0)
                if not ids:
                    sink.write(json.dumps({"name": name, "status": "no cells"}) + "\n")
                    continue
                part = args.work / f"m.{len(queue)}.json"
                spec = args.work / f"m.{len(queue)}.spec"
                spec.write_text(json.dumps({"ids": ids, "clean": {c: clean[c] for c in ids}}))
                proc = subprocess.Popen(
                    _self("--child-mutant", name, "--spec", str(spec), "--matrix",
                          args.matrix, "--cap", str(args.cap), "--out", str(part),
                          *(["--live"] * args.live)),
                    env=_env(args, name), stdout=subprocess.DEVNULL,
                    stderr=_log(args.work / f"m.{len(queue)}.log"))
                running[name] = (proc, time.time(), part, ids)
            if not queue and not running:
                break
            if queue and time.time() >= deadline and not running:
                break
            time.sleep(0.2)
            for name, (proc, started, _, _) in list(running.items()):
                late = time.time() - started > args.cap + 90 or time.time() > deadline + 30
                if proc.poll() is not None:
                    finish(name, False)
                elif late:
                    proc.kill()
                    proc.wait()
                    finish(name, True)
        for name, _ in queue:
            sink.write(json.dumps({"name": name, "status": "not run (deadline)"}) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(prog="mutation_cuda")
    p.add_argument("--names", type=Path, help="one mutant name a line")
    p.add_argument("--matrix", default="matrices/default.toml")
    p.add_argument("--filter", default="", help="the candidate cells (matrix run's --filter)")
    p.add_argument("--skip-model", action="append", default=[])
    p.add_argument("--live", action="store_true")
    p.add_argument("--shards", type=int, default=14)
    p.add_argument("--parallel", type=int, default=14)
    p.add_argument("--map-seconds", type=float, default=120)
    p.add_argument("--seconds", type=float, default=300, help="start no mutant after")
    p.add_argument("--cap", type=float, default=60, help="seconds of cells per mutant")
    p.add_argument("--work", type=Path, default=Path("/tmp/mutcuda"))
    p.add_argument("--out", type=Path)
    p.add_argument("--map-file", type=Path, help="a map.jsonl made earlier: no map phase")
    p.add_argument("--child-map", type=Path)
    p.add_argument("--child-mutant")
    p.add_argument("--spec", type=Path)
    p.add_argument("--deadline", type=float)
    args = p.parse_args()
    if args.child_map:
        ids = [i for i in args.child_map.read_text().splitlines() if i]
        return map_shard(ids, args.matrix, args.live, args.deadline, args.out)
    if args.child_mutant:
        spec = json.loads(args.spec.read_text())
        return mutant_child(args.child_mutant, spec["ids"], spec["clean"], args.matrix,
                            args.live, args.cap, args.out)
    from batchlab.gate.mutation_shim import install

    install(force=True)  # the mutants tree imports mutmut's trampoline
    from batchlab.cells.select import select
    from batchlab.cells.spec import load_matrix

    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = select(load_matrix(Path(args.matrix)), args.filter or None, None)
    ids = sorted((c.id for c in chosen if c.model not in args.skip_model),
                 key=lambda i: (i.split("/")[1], i))
    names = [n.strip() for n in args.names.read_text().splitlines() if n.strip()]
    if args.map_file:
        (args.out / "map.jsonl").write_text(args.map_file.read_text())
        clean = {r["cell"]: r for r in map(json.loads, args.map_file.read_text().splitlines())
                 if "functions" in r}
    else:
        clean = run_map(args, ids)
    run_mutants(args, names, clean)


if __name__ == "__main__":
    main()
