"""Which default-matrix cells run each line of the engine: the killers a mutant can have.

A mutant changes one line (or a few) of one function. A cell that never runs that line
computes exactly what the clean engine computes, so it cannot kill the mutant; running it
only costs time. This module runs the cells once on the clean engine under line coverage
with one coverage context per cell (``Coverage.switch_context``) and writes, per engine
file and line, the cells that ran it, with each cell's clean status and seconds.

The cells run in-process in a fresh interpreter started by the caller
(``python -c 'from batchlab.gate.mutation_map import main; main()' ...``), coverage on
before the engine is imported (see gate/coverage.py: an engine module imported before
coverage starts would read its ``def`` lines as never run). Shards (``--shard i/n``, every
n-th cell from the i-th) let several interpreters share the work; ``merge`` joins them.

The map is for the clean engine at one commit: a mutant applied to another source would
be given the wrong killers.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ENGINE_DIR = Path(__file__).resolve().parent.parent / "engine"
PROJECT_ROOT = ENGINE_DIR.parent.parent


def measure(matrix: str, goldens: str, ids: list[str] | None, shard: tuple[int, int],
            skip_models: tuple[str, ...] = (), seconds: float | None = None) -> dict:
    """Run the shard's cells under per-cell line coverage; the map as a JSON-ready dict.
    With ``seconds``, no cell starts after that budget: the cells left out are listed under
    ``unmapped`` (a mutant is then given no killer among them; the campaign says so)."""
    import coverage

    cov = coverage.Coverage(source=[str(ENGINE_DIR)], data_file=None, config_file=False)
    cov.start()
    try:
        from batchlab.cells.spec import load_matrix
        from batchlab.matrix.evaluate import Reference, evaluate_cell

        cells = [c for c in load_matrix(Path(matrix)) if c.model not in skip_models]
        if ids is not None:
            wanted = set(ids)
            cells = [c for c in cells if c.id in wanted]
        index, count = shard
        cells = cells[index::count]
        ref = Reference(matrix=matrix, goldens=Path(goldens))
        clean, unmapped = {}, []
        began = time.perf_counter()
        for cell in cells:
            if seconds is not None and time.perf_counter() - began > seconds:
                unmapped.append(cell.id)
                continue
            cov.switch_context(cell.id)
            start = time.perf_counter()
            result = evaluate_cell(cell, ref)
            clean[cell.id] = {"status": str(result.status),
                              "seconds": round(time.perf_counter() - start, 4)}
    finally:
        cov.stop()
    data = cov.get_data()
    lines: dict[str, dict[str, list[str]]] = {}
    for measured in data.measured_files():
        rel = str(Path(measured).resolve().relative_to(PROJECT_ROOT))
        by_line = data.contexts_by_lineno(measured)
        lines[rel] = {str(n): sorted(c for c in ctx if c) for n, ctx in by_line.items()}
    return {"cells": clean, "lines": lines, "unmapped": unmapped}


def merge(parts: list[dict]) -> dict:
    """One map from several shards' maps."""
    cells: dict = {}
    unmapped: list[str] = []
    lines: dict[str, dict[str, list[str]]] = {}
    for part in parts:
        cells.update(part["cells"])
        unmapped += part.get("unmapped", [])
        for file, by_line in part["lines"].items():
            mine = lines.setdefault(file, {})
            for n, ids in by_line.items():
                mine[n] = sorted(set(mine.get(n, ())) | set(ids))
    return {"cells": cells, "lines": lines, "unmapped": sorted(unmapped)}


def unit_map(coverage_files: list[str], root: str,
             passed: set[str] | None = None) -> dict[str, dict[str, list[str]]]:
    """The unit tests' map from coverage runs under gate/unit_contexts.py: engine file
    -> line -> the test node ids that ran it (only those in ``passed``, when given)."""
    import coverage

    data = coverage.CoverageData(no_disk=True)
    for name in coverage_files:
        part = coverage.CoverageData(basename=name)
        part.read()
        data.update(part)
    lines: dict[str, dict[str, list[str]]] = {}
    for measured in data.measured_files():
        path = Path(measured).resolve()
        if not path.is_relative_to(Path(root).resolve()):
            continue
        rel = str(path.relative_to(Path(root).resolve()))
        by_line = data.contexts_by_lineno(measured)
        lines[rel] = {str(n): sorted({c for c in ctx if c and (passed is None or c in passed)})
                      for n, ctx in by_line.items()}
    return lines


def main() -> None:
    """``--matrix M --goldens G --shard i/n --out F [--skip-model NAME ...]``."""
    import argparse

    p = argparse.ArgumentParser(prog="mutation_map")
    p.add_argument("--matrix", default="matrices/default.toml")
    p.add_argument("--goldens", default="goldens")
    p.add_argument("--shard", default="0/1")
    p.add_argument("--skip-model", action="append", default=[])
    p.add_argument("--first", type=int, help="only the first N cells (a trial run)")
    p.add_argument("--seconds", type=float, help="start no cell after this many seconds")
    p.add_argument("--merge", nargs="*", help="join these shard maps into --out instead")
    p.add_argument("--unit-coverage", nargs="*", default=[],
                   help="with --merge: coverage data files of the unit tests to add")
    p.add_argument("--unit-passed", help="with --merge: the node ids of the unit tests that "
                   "passed on the clean engine; the others kill nothing")
    p.add_argument("--out", required=True)
    a = p.parse_args(sys.argv[1:])
    if a.merge is not None:
        found = merge([json.loads(Path(f).read_text()) for f in a.merge])
        present = [f for f in a.unit_coverage if Path(f).exists()]
        if present:
            passed = None
            if a.unit_passed:
                passed = set(Path(a.unit_passed).read_text().split()) \
                    if Path(a.unit_passed).exists() else set()
            found["unit"] = unit_map(present, str(PROJECT_ROOT), passed)
        Path(a.out).write_text(json.dumps(found, sort_keys=True))
        return
    index, count = (int(x) for x in a.shard.split("/"))
    ids = None
    if a.first:
        from batchlab.cells.spec import load_matrix

        ids = [c.id for c in load_matrix(Path(a.matrix))][:a.first]
    found = measure(a.matrix, a.goldens, ids, (index, count), tuple(a.skip_model), a.seconds)
    Path(a.out).write_text(json.dumps(found, sort_keys=True))
