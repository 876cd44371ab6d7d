"""Run mutants of CUDA-only engine code against a matrix on the GPU, one process each.

The CPU campaign (gate/mutation_run.py) forks every mutant from a server that imported
MLX: a CUDA context does not survive a fork, so here each mutant is a fresh
``batchlab matrix run`` over the mutants tree with ``MUTANT_UNDER_TEST`` set, a few at a
time on the one GPU. The killers are the cells of a CUDA matrix (``--matrix`` and
``--filter``: the CUDA goldens' l1/fast cells, the invariant path's solo gate and its
second judge with ``--live``). A mutant is **killed** when some cell ends with another
status than on the clean tree, or a cell of the clean run has no result (a crash that
ended the run); **survived** when every cell keeps its clean status.

The mutants tree imports ``mutmut.mutation.trampoline``; the matrix's workers are spawned
processes, so the stand-in (gate/mutation_shim.py) is put on their path as a package.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from batchlab.report.files import JSONL, read_results

SHIM_MODULE = (
    "from batchlab.gate.mutation_shim import MutantDict, wrap_in_trampoline  # noqa: F401\n"
)


def verdict(clean: dict[str, str], mutant: dict[str, str]) -> tuple[str, list[str]]:
    """``killed`` with the cells whose status moved (or that never reported), else ``survived``."""
    moved = [cell for cell, status in clean.items() if mutant.get(cell) != status]
    return ("killed", moved) if moved else ("survived", [])


def statuses(report: Path) -> dict[str, str]:
    """Each cell's status in a report folder; none where the run wrote no results."""
    if not (report / JSONL).exists():
        return {}
    return {r.cell_id: str(r.status) for r in read_results(report)}


def write_shim(folder: Path) -> Path:
    package = folder / "mutmut" / "mutation"
    package.mkdir(parents=True, exist_ok=True)
    (folder / "mutmut" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "trampoline.py").write_text(SHIM_MODULE)
    return folder


def run_matrix(args: argparse.Namespace, report: Path,
               mutant: str | None) -> tuple[dict[str, str], float, int]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(args.shim), str(args.mutants), os.environ.get("PYTHONPATH", "")]))
    env.pop("MUTANT_UNDER_TEST", None)
    if mutant:
        env["MUTANT_UNDER_TEST"] = mutant
    cmd = [sys.executable, "-m", "batchlab", "matrix", "run", "--matrix", args.matrix,
           "--filter", args.filter, "--jobs", str(args.jobs), "--report", str(report)]
    if args.live:
        cmd.append("--live")
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, env=env, cwd=args.mutants, capture_output=True,
                              timeout=args.timeout)
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = -1
    return statuses(report), time.monotonic() - start, code


def main() -> None:
    p = argparse.ArgumentParser(prog="mutation_gpu")
    p.add_argument("--mutants", type=Path, required=True, help="the mutants tree (project root)")
    p.add_argument("--names", type=Path, required=True, help="one mutant name a line")
    p.add_argument("--matrix", required=True)
    p.add_argument("--filter", default="")
    p.add_argument("--live", action="store_true")
    p.add_argument("--jobs", type=int, default=3, help="matrix workers per mutant")
    p.add_argument("--parallel", type=int, default=4, help="mutants at a time")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--work", type=Path, default=Path("/tmp/mutgpu"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.shim = write_shim(args.work / "shim")
    names = [n.strip() for n in args.names.read_text().splitlines() if n.strip()]
    clean, seconds, code = run_matrix(args, args.work / "clean", None)
    print(f"clean: {len(clean)} cells in {seconds:.0f} s (exit {code}):",
          {s: list(clean.values()).count(s) for s in set(clean.values())}, flush=True)
    if not clean:
        sys.exit("the clean run reported no cell: fix the matrix or the tree first")

    def one(i_name: tuple[int, str]) -> dict:
        i, name = i_name
        got, secs, rc = run_matrix(args, args.work / f"m{i}", name)
        status, moved = verdict(clean, got)
        return {"name": name, "status": status, "moved": moved[:8], "cells": len(got),
                "seconds": round(secs, 1), "exit": rc}

    with ThreadPoolExecutor(args.parallel) as pool, args.out.open("w") as out:
        for row in pool.map(one, enumerate(names)):
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(row["status"], row["name"], row["moved"][:2], f'{row["seconds"]} s', flush=True)


if __name__ == "__main__":
    main()
