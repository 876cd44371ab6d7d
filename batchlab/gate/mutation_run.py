"""Run a sample of mutants against the default matrix's cells, then the unit tests.

The killers of one mutant are the cells that ran one of its changed lines on the clean
engine (gate/mutation_map.py); a cell that never runs the line computes what the clean
engine computes. They run in fail-fast order (gate/killers.py's cell ranks, then the
cheapest first). A mutant is **killed** by the matrix when some cell ends with another
status than it had on the clean engine (PASS, or the pinned ORACLE-BUG / UNSUPPORTED it
always has), crashes, or runs past its timeout (20x its clean time, at least 10 s);
**survived** when every killer kept its clean status; **no cells** when no cell runs
the changed lines (the matrix cannot kill it; it counts as survived in the score);
**capped** when its killers outlast the per-mutant budget (the cells left unrun are
counted, and the campaign reports the mutant apart: not a kill, not a survival).

Every mutant the matrix did not kill then meets the unit tests (``--unit`` files, pytest
``-x``) for the second figure, "matrix + unit tests".

Processes: one server imports MLX, the mutants tree and the matrix, and computes nothing;
each mutant runs in a child forked from it (MLX does not survive a fork once it has
computed: docs/mutation.md), with ``MUTANT_UNDER_TEST`` naming the mutant (mutmut 3's
trampolines read it per call; gate/mutation_shim.py stands in for mutmut where it is not
installed). Results stream to a JSONL file, one line a job, so a campaign cut short by
its deadline still leaves every finished mutant on disk.

**Import-time mutants.** A function that runs while the engine is imported (a
descriptor's ``__set_name__``, a factory that builds the PATHS table or a closure in it)
has already run, unmutated, in the server before any fork. The server imports under the
shim's ``recording()`` (and imports every module the plan names), so it knows those
functions; their mutants get a **fresh** child instead: forked, then ``exec`` of a new
interpreter with ``MUTANT_UNDER_TEST`` set before anything is imported
(``fresh_main``), which runs the same cells or tests as a forked child would. The line map
cannot name their killers (the lines ran at import, under no cell's coverage context):
every cell of the map is a killer, in the same fail-fast order, and every ``--unit`` file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CELL_TIMEOUT_FLOOR = 10.0  # seconds: a cell this slow under a mutant is a hang
CELL_TIMEOUT_FACTOR = 20.0


@dataclass(slots=True, kw_only=True)
class Job:
    name: str  # the mutant, mutmut's name
    kind: str  # "matrix" or "unit"
    cells: tuple[str, ...] = ()
    started: float = 0.0
    pid: int = 0
    out: str = ""
    extra: dict = field(default_factory=dict)
    fresh: bool = False  # the mutant's function runs at import: a new interpreter, not a fork


def killer_cells(lines: list[tuple[str, int]], line_map: dict, clean: dict) -> list[str]:
    """The cells that ran any of ``lines`` (file, line) on the clean engine, fail-fast first."""
    from batchlab.gate.killers import rank

    found: set[str] = set()
    for file, n in lines:
        found.update(line_map.get(file, {}).get(str(n), ()))
    return sorted(found, key=lambda c: (rank("tests/parity/x[" + c + "]"),
                                        clean.get(c, {}).get("seconds", 1.0), c))


def every_cell(clean: dict) -> list[str]:
    """Every cell of the map: the killers of a mutant that runs at import. What runs at
    import builds tables keyed by path (PATHS, a path's refusal), so the first cells are
    one of each (path, clean status) pair (a refusal pinned UNSUPPORTED among them), each
    the first in fail-fast order; then the rest in that order."""
    from batchlab.gate.killers import rank

    ordered = sorted(clean, key=lambda c: (rank("tests/parity/x[" + c + "]"),
                                           clean[c].get("seconds", 1.0), c))
    first: dict[tuple[str, str], str] = {}
    for c in ordered:
        first.setdefault((c.split("/", 1)[0], clean[c].get("status", "")), c)
    head = set(first.values())
    return [c for c in ordered if c in head] + [c for c in ordered if c not in head]


def import_time_functions(plan: dict) -> set[str]:
    """The mutated functions (shim stems) that run while the engine and the matrix are
    imported, with the shim installed; the plan's modules are imported too."""
    import importlib

    from batchlab.gate.mutation_shim import install, recording, stem

    install(force=True)
    with recording() as called:
        import mlx.core  # noqa: F401 - imported (never used) before the fork: see the docstring

        import batchlab.cells.spec
        import batchlab.matrix.evaluate  # noqa: F401 - imported for what runs at import
        for m in plan["mutants"]:
            importlib.import_module(stem(m["name"]).rpartition(".")[0])
    return set(called)


def unit_tests(lines: list[tuple[str, int]], unit_map: dict | None,
               files: list[str]) -> list[str]:
    """The unit tests that ran one of ``lines`` on the clean engine (pytest node ids, from
    the map's pytest-cov contexts), limited to ``files``; all of ``files`` with no map."""
    if unit_map is None:
        return list(files)
    found: set[str] = set()
    for file, n in lines:
        found.update(unit_map.get(file, {}).get(str(n), ()))
    return sorted(t for t in found if t.startswith(tuple(files)))


def _matrix_child(job: Job, cells_by_id: dict, clean: dict, ref, cap: float) -> dict:
    from batchlab.matrix.evaluate import evaluate_cell

    start = time.perf_counter()
    run = 0
    for cid in job.cells:
        if time.perf_counter() - start > cap:
            return {"status": "capped", "cells_run": run, "cells": len(job.cells)}
        expected = clean[cid]["status"]
        limit = max(CELL_TIMEOUT_FLOOR, CELL_TIMEOUT_FACTOR * clean[cid]["seconds"])
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            got = evaluate_cell(cells_by_id[cid], ref)
            status, detail = str(got.status), got.detail
        except TimeoutError:
            status, detail = "TIMEOUT", f"past {limit:.0f} s"
        except Exception as err:  # noqa: BLE001 - a crash under a mutant is a kill
            status, detail = "CRASH", f"{type(err).__name__}: {err}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        run += 1
        if status != expected:
            kind = "timeout" if status == "TIMEOUT" else "killed"
            return {"status": kind, "cells_run": run, "cells": len(job.cells), "by": cid,
                    "got": status, "expected": expected, "detail": str(detail)[:300]}
    return {"status": "survived" if job.cells else "no cells", "cells_run": run,
            "cells": len(job.cells)}


def _unit_child(job: Job, unit_args: list[str]) -> dict:
    import pytest

    code = pytest.main([*unit_args, "-x", "-q", "--no-header", "-p", "no:cacheprovider",
                        "-p", "no:randomly", "-n", "0"])  # addopts ask xdist for -n auto
    status = {0: "survived", 1: "killed", 5: "no tests"}.get(int(code), f"pytest exit {code}")
    return {"status": status}


def _alarm(signum, frame):
    raise TimeoutError


def run(plan: dict, line_map: dict, *, matrix: str, goldens: str, jobs: int, cap: float,
        unit_cap: float, unit_args: list[str], deadline: float, out: Path) -> None:
    """Run every mutant of ``plan`` (``{"mutants": [{"name", "lines": [[file, n], ...]}]}``)
    until ``deadline`` (time.time()); one JSON line per finished job into ``out``."""
    from batchlab.gate.mutation_shim import stem

    at_import = import_time_functions(plan)
    from batchlab.cells.spec import load_matrix
    from batchlab.matrix.evaluate import Reference

    clean = line_map["cells"]
    cells_by_id = {c.id: c for c in load_matrix(Path(matrix)) if c.id in clean}
    ref = Reference(matrix=matrix, goldens=Path(goldens))
    spec = {"matrix": matrix, "goldens": goldens, "cap": cap}
    queue = []
    for m in plan["mutants"]:
        fresh = stem(m["name"]) in at_import
        lines = [tuple(x) for x in m["lines"]]
        cells = every_cell(clean) if fresh else killer_cells(lines, line_map["lines"], clean)
        queue.append(Job(name=m["name"], kind="matrix", cells=tuple(cells), fresh=fresh,
                         extra={"lines": lines, "spec": spec}))
    unit_map = line_map.get("unit")
    queue.reverse()  # pop() from the end: the plan's order
    running: dict[int, Job] = {}
    tmp = out.parent / (out.name + ".parts")
    tmp.mkdir(parents=True, exist_ok=True)
    with out.open("a") as sink:
        while queue or running:
            while queue and len(running) < jobs and time.time() < deadline:
                job = queue.pop()
                job.out = str(tmp / f"{len(running)}-{time.monotonic_ns()}.json")
                job.started = time.time()
                pid = os.fork()
                if pid == 0:
                    if job.fresh:
                        _fresh_child(job, clean)
                    _child(job, cells_by_id, clean, ref, cap, unit_args)
                job.pid = pid
                running[pid] = job
            if not running:
                break
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                _reap_overdue(running, cap, unit_cap, deadline)
                time.sleep(0.02)
                continue
            job = running.pop(pid)
            result = _collect(job, status)
            if job.fresh:
                result["fresh"] = True  # ran in a new interpreter: its function runs at import
            sink.write(json.dumps(result) + "\n")
            sink.flush()
            if job.kind == "matrix" and result["status"] in ("survived", "no cells", "capped") \
                    and unit_args:
                tests = unit_tests(job.extra["lines"], None if job.fresh else unit_map,
                                   unit_args)
                if tests:
                    # behind the matrix jobs: the headline figure is the matrix's
                    queue.insert(0, Job(name=job.name, kind="unit", cells=tuple(tests),
                                        fresh=job.fresh, extra={"spec": job.extra["spec"]}))
                else:
                    sink.write(json.dumps({"name": job.name, "kind": "unit",
                                           "status": "no unit tests"}) + "\n")
        for job in queue:
            sink.write(json.dumps({"name": job.name, "kind": job.kind,
                                   "status": "not run (deadline)"}) + "\n")


def _child(job: Job, cells_by_id, clean, ref, cap, unit_args) -> None:
    code = 0
    try:
        quiet = os.open(os.devnull, os.O_WRONLY)  # pytest's and MLX's chatter stay out of the log
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        os.environ["MUTANT_UNDER_TEST"] = job.name
        signal.signal(signal.SIGALRM, _alarm)
        if job.kind == "matrix":
            result = _matrix_child(job, cells_by_id, clean, ref, cap)
        else:
            result = _unit_child(job, list(job.cells))
        Path(job.out).write_text(json.dumps(result))
    except BaseException as err:  # noqa: BLE001 - the child must always exit, never return
        Path(job.out).write_text(json.dumps({"status": "error",
                                             "detail": f"{type(err).__name__}: {err}"}))
        code = 3
    finally:
        sys.stdout.flush()
        os._exit(code)


def _fresh_child(job: Job, clean: dict) -> None:
    """Replace this forked child with a new interpreter that imports the engine with the
    mutant already switched on (``fresh_main``); it never returns."""
    try:
        spec = dict(job.extra["spec"], name=job.name, kind=job.kind, cells=list(job.cells),
                    out=job.out, clean={c: clean[c] for c in job.cells if c in clean})
        path = Path(job.out + ".spec")
        path.write_text(json.dumps(spec))
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        env = dict(os.environ, MUTANT_UNDER_TEST=job.name)
        os.execve(sys.executable, [sys.executable, "-c", "from batchlab.gate.mutation_run "
                                   "import fresh_main; fresh_main()", str(path)], env)
    finally:  # exec failed: no result file, the parent reports an error
        os._exit(3)


def fresh_main() -> None:
    """A fresh child (``python -c ... fresh_main()`` SPEC): the shim first, then the engine
    and the matrix, imported with ``MUTANT_UNDER_TEST`` already set, then the job."""
    from batchlab.gate.mutation_shim import install

    install(force=True)
    spec = json.loads(Path(sys.argv[1]).read_text())
    job = Job(name=spec["name"], kind=spec["kind"], cells=tuple(spec["cells"]),
              out=spec["out"], fresh=True)
    assert os.environ.get("MUTANT_UNDER_TEST") == job.name, "set by the parent before exec"
    cells_by_id = ref = None
    if job.kind == "matrix":
        try:
            import importlib

            from batchlab.gate.mutation_shim import stem

            importlib.import_module(stem(job.name).rpartition(".")[0])  # as the server did
            from batchlab.cells.spec import load_matrix
            from batchlab.matrix.evaluate import Reference

            cells_by_id = {c.id: c for c in load_matrix(Path(spec["matrix"]))
                           if c.id in spec["clean"]}
            ref = Reference(matrix=spec["matrix"], goldens=Path(spec["goldens"]))
        except Exception as err:  # noqa: BLE001 - what the mutant broke at import
            # the clean engine imports; under the mutant no cell can run (a matrix run
            # stops here): a kill, as a cell's crash is
            Path(job.out).write_text(json.dumps({
                "status": "killed", "cells_run": 0, "cells": len(job.cells),
                "by": "(import)", "got": "CRASH", "expected": "imports",
                "detail": f"no cell can run: importing the engine or loading the matrix "
                          f"under the mutant raised "
                          f"{type(err).__name__}: {err}"[:300]}))
            os._exit(0)
    _child(job, cells_by_id, spec["clean"], ref, spec["cap"], list(job.cells))


def _reap_overdue(running: dict[int, Job], cap: float, unit_cap: float,
                  deadline: float) -> None:
    now = time.time()
    for pid, job in running.items():
        limit = job.started + (cap + 60 if job.kind == "matrix" else unit_cap)
        if now > limit or now > deadline + 5:
            job.extra["killed_by_parent"] = "deadline" if now > deadline + 5 else "overdue"
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(pid, signal.SIGKILL)


def _collect(job: Job, status: int) -> dict:
    base = {"name": job.name, "kind": job.kind, "seconds": round(time.time() - job.started, 2)}
    path = Path(job.out)
    Path(job.out + ".spec").unlink(missing_ok=True)
    if path.exists():
        base.update(json.loads(path.read_text()))
        path.unlink()
        return base
    why = job.extra.get("killed_by_parent")
    if why == "deadline":
        base["status"] = "not finished (deadline)"
    elif why == "overdue":
        base["status"] = "timeout" if job.kind == "matrix" else "capped"
    elif os.WIFSIGNALED(status):
        base["status"] = "segfault"
        base["detail"] = f"signal {os.WTERMSIG(status)}"
    else:
        base["status"] = "error"
        base["detail"] = f"exit {os.WEXITSTATUS(status)} with no result"
    return base


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(prog="mutation_run")
    p.add_argument("--plan", required=True)
    p.add_argument("--map", required=True)
    p.add_argument("--matrix", default="matrices/default.toml")
    p.add_argument("--goldens", default="goldens")
    p.add_argument("--jobs", type=int, default=14)
    p.add_argument("--cap", type=float, default=25.0, help="seconds of cells per mutant")
    p.add_argument("--unit-cap", type=float, default=60.0)
    p.add_argument("--unit", action="append", default=[],
                   help="a unit test file or node id the survivors meet (repeatable)")
    p.add_argument("--seconds", type=float, required=True, help="stop starting jobs after")
    p.add_argument("--out", required=True)
    a = p.parse_args(sys.argv[1:])
    run(json.loads(Path(a.plan).read_text()), json.loads(Path(a.map).read_text()),
        matrix=a.matrix, goldens=a.goldens, jobs=a.jobs, cap=a.cap, unit_cap=a.unit_cap,
        unit_args=a.unit, deadline=time.time() + a.seconds, out=Path(a.out))
