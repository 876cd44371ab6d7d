"""Branch coverage of ``batchlab/engine`` under a matrix's cells alone (issue 14, item 2).

The cells run in-process, one after another (``evaluate_cell`` in a loop, not the process
pool: coverage would have to follow every worker), inside a fresh interpreter started
for the measurement. Fresh, because the lines an engine module runs when it is imported
(its ``def`` and ``class`` statements) only count if coverage is already on at import;
in a process that has imported the engine before (pytest, the self-test) they would all
read as missed.

Only the matrix counts: the unit tests are not run here, so a branch that only a unit
test reaches is reported as uncovered (that is the point: the gate is the matrix).

Lines no valid cell can reach are marked in the source, each with a reason from
``REASONS`` (an unknown reason is an error), and are not counted: ``# not gated: TAG``
leaves the line (an ``if`` or ``def`` with its block) out, ``# one way: TAG`` leaves out
the branch of an ``if`` that the schedule always takes one way. Every marked line is
listed in the report with its reason, so what the figure leaves out is in plain view.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ENGINE_DIR = Path(__file__).resolve().parent.parent / "engine"
PROJECT_ROOT = ENGINE_DIR.parent.parent
DEFAULT_THRESHOLD = 98.0  # percent of branches (issue 14)
# Cells whose engine run produced a trajectory compared with the reference; any other
# status means the figure was measured on a broken or unjudged engine.
SOUND = frozenset({"PASS", "ORACLE-BUG", "UNSUPPORTED"})

NOT_GATED = r"#\s*not gated: "  # coverage.py regexes: the line (and its block) is left out
ONE_WAY = r"#\s*one way: "  # the line's branch is not counted as partial
MARKER = re.compile(r"#\s*(not gated|one way): ([a-z][a-z -]*[a-z])")
REASONS = {
    "input": "a check of the caller's input: matrix validation refuses such a cell before "
             "anything runs (tests/unit check the message)",
    "misuse": "a check of the engine's own call order, which the scheduler keeps "
              "(tests/unit break the order on purpose)",
    "refusal": "a model or cache type the engine refuses; no zoo model is one "
               "(tests/unit feed one)",
    "protocol": "mlx-lm's cache protocol (nbytes, state =, to_quantized; a hashed paged "
                "block trimmed into) that the scheduler never calls (trim, size, empty and "
                "prepare's left_padding are gone since round 5: nothing the engine runs "
                "calls them); tests/unit/test_engine_caches.py drives it against mlx-lm's "
                "own caches",
    "empty merge": "merge of rows that are all empty: the scheduler builds fresh rows with "
                   "make_batch_caches and merges only when some row has history",
    "empty extend": "extend where a side lacks its keys or state arrays: the scheduler "
                    "extends only prefilled batches",
    "unprepared": "finalize without prepare: the scheduler finalizes exactly what it prepared",
    "mid-prefill": "a filter between prepare and finalize: a prefill runs within one call, "
                   "nothing filters inside it",
    "no arrays": "the batch size of a state with no arrays: it is read after a prefill",
    "padded prefill": "the scheduler prepares only a prefill in which some row is padded",
    "prepared": "the scheduler finalizes only a prepared, prefilled cache",
    "has keys": "a prefilled cache always has keys (the row cost reads token_bytes after "
                "a forward; a quantized batch switches after its first forward)",
    "context": "a row's processor context always holds its prompt's fed tokens",
    "cpu": "the CPU backend drops all-True decode masks; a GPU keeps them (the H200 runs "
           "take the other way)",
    "kv history": "prompt-cache history no cell reaches: an invariant row's (extract, merge, "
                  "size: the invariant path refuses history), a quantized row extracted "
                  "before its quantization start or holding no keys (the kv-history cells "
                  "quantize from the first write); unit tests check the round trip",
    "serve": "used by batchlab serve only: its --kv-bits flags naming a kv path the "
             "matrix's registered already (tests/serve cover it)",
    "bench only": "a paged pool of fixed size (its OutOfBlocks refusal) or a paged "
                  "scheduler with prefix sharing off: batchlab bench's paged variants only "
                  "(tests/unit/test_paged_blocks.py covers the refusal)",
    "config": "a model config that does not name head_dim, or a module that nests its "
              "children in a dict: no zoo or real model does",
    "no hybrid kv": "quantized KV on a hybrid model (state or CacheList layers beside its "
                    "attention): every zoo hybrid has head_dim 16, which quantized KV refuses",
    "gpu only": "code that runs only on MLX's CUDA backend (the row-attention kernel, the "
                "quantized-attention form CUDA takes): the CPU gate cannot reach it; the "
                "H200 runs do (reports/invariant/cuda-sm90, reports/lab/qkv-cuda-sm90)",
    "no zoo module": "a padded depthwise conv: every nn.Conv1d of mlx-lm's models is "
                     "built with padding=0, so no zoo or real model has one",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Miss:
    """One uncovered line, or one branch never taken (``target``: the line it would jump
    to; a negative target is an exit from the function or the module, coverage.py's
    convention)."""

    file: str  # relative to the project root, e.g. batchlab/engine/caches/kv.py
    line: int
    target: int | None = None  # None: the line itself never ran
    source: str = ""
    function: str = ""  # the innermost def around the line, e.g. BatchKV.merge

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def describe(self) -> str:
        if self.target is None:
            return f"{self.where} line never runs: {self.source}"
        to = "exit" if self.target < 0 else f"line {self.target}"
        return f"{self.where} branch to {to} never taken: {self.source}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Exclusion:
    """A line left out of the count by a marker, with the marker's reason."""

    file: str
    line: int
    kind: str  # "not gated" (the line and its block) or "one way" (its branch)
    tag: str
    source: str

    @property
    def reason(self) -> str:
        return REASONS[self.tag]


@dataclass(frozen=True, slots=True, kw_only=True)
class FileCoverage:
    file: str
    num_statements: int
    covered_statements: int
    num_branches: int
    covered_branches: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCoverage:
    matrix: str
    pattern: str | None
    num_cells: int
    statuses: dict[str, int]
    files: tuple[FileCoverage, ...]
    misses: tuple[Miss, ...]
    exclusions: tuple[Exclusion, ...] = ()
    unmarked: tuple[int, int] = (0, 0)  # (covered, all) branches with no line left out

    @property
    def num_branches(self) -> int:
        return sum(f.num_branches for f in self.files)

    @property
    def covered_branches(self) -> int:
        return sum(f.covered_branches for f in self.files)

    @property
    def branch_percent(self) -> float:
        return 100.0 * self.covered_branches / self.num_branches if self.num_branches else 100.0

    @property
    def num_statements(self) -> int:
        return sum(f.num_statements for f in self.files)

    @property
    def covered_statements(self) -> int:
        return sum(f.covered_statements for f in self.files)

    @property
    def unsound(self) -> dict[str, int]:
        """Statuses that make the figure meaningless (FAIL, ERROR, STALE, NO-GOLDEN)."""
        return {s: n for s, n in self.statuses.items() if s not in SOUND}

    def summary(self) -> str:
        return (f"engine branch coverage {self.branch_percent:.2f}% "
                f"({self.covered_branches}/{self.num_branches} branches; "
                f"{self.covered_statements}/{self.num_statements} lines) "
                f"over {self.num_cells} cells, {len(self.exclusions)} marked lines left out "
                f"(with none left out: {self.unmarked_percent:.2f}%, "
                f"{self.unmarked[0]}/{self.unmarked[1]})")

    @property
    def unmarked_percent(self) -> float:
        covered, total = self.unmarked
        return 100.0 * covered / total if total else 100.0

    def as_dict(self) -> dict:
        return {
            "matrix": self.matrix, "filter": self.pattern, "cells": self.num_cells,
            "statuses": self.statuses, "branch_percent": round(self.branch_percent, 3),
            "branches": self.num_branches, "covered_branches": self.covered_branches,
            "statements": self.num_statements, "covered_statements": self.covered_statements,
            "files": [_fields(f) for f in self.files],
            "misses": [_fields(m) | {"where": m.where} for m in self.misses],
            "exclusions": [_fields(e) | {"reason": e.reason} for e in self.exclusions],
            "unmarked_branches": list(self.unmarked),
            "unmarked_branch_percent": round(self.unmarked_percent, 3),
        }


def _fields(record) -> dict:
    return {name: getattr(record, name) for name in record.__slots__}


def measure(matrix: Path, goldens: Path, pattern: str | None = None) -> EngineCoverage:
    """Run the cells of ``matrix`` matching ``pattern`` (``select`` syntax) under branch
    coverage in a fresh interpreter; the engine's coverage and the cells' statuses."""
    context = multiprocessing.get_context("spawn")  # fresh: see the module docstring
    with context.Pool(1) as pool:
        raw = pool.apply(_measure_here, (str(matrix), str(goldens), pattern))
    if raw["cells"] == 0:
        raise ValueError(f"no cell of {matrix} matches --filter {pattern!r}; "
                         f"see `batchlab matrix list --matrix {matrix}`")
    return _record(raw, matrix, pattern)


def _measure_here(matrix: str, goldens: str, pattern: str | None) -> dict:
    """In the fresh interpreter: coverage on, then import and run the engine."""
    import coverage

    cov = coverage.Coverage(branch=True, source=[str(ENGINE_DIR)], data_file=None,
                            config_file=False)
    cov.exclude(NOT_GATED)
    cov.exclude(ONE_WAY, which="partial")
    cov.start()
    try:
        from batchlab.cells.select import select
        from batchlab.cells.spec import load_matrix
        from batchlab.matrix.evaluate import Reference, evaluate_cell

        cells = select(load_matrix(Path(matrix)), pattern, None)
        ref = Reference(matrix=matrix, goldens=Path(goldens))
        statuses = Counter(evaluate_cell(cell, ref).status for cell in cells)
    finally:
        cov.stop()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coverage.json"
        cov.json_report(outfile=str(out), show_contexts=False)
        report = json.loads(out.read_text())
        # the same data with no marker honoured: the figure the markers are weighed against
        cov.clear_exclude()
        cov.clear_exclude(which="partial")
        cov.json_report(outfile=str(out), show_contexts=False)
        plain = json.loads(out.read_text())["totals"]
    return {"cells": len(cells), "statuses": dict(statuses), "files": report["files"],
            "unmarked": (plain["covered_branches"], plain["num_branches"])}


def _record(raw: dict, matrix: Path, pattern: str | None) -> EngineCoverage:
    files, misses = [], []
    for name in sorted(raw["files"]):
        data = raw["files"][name]
        path = Path(name).resolve()
        rel = str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else name
        summary = data["summary"]
        # Branches counted from the arc lists, not the summary: coverage.py's summary
        # counts both arcs of a "one way" (partial-excluded) line as covered, taken or not;
        # here the way never taken leaves the count instead of inflating it.
        executed, missing = len(data["executed_branches"]), len(data["missing_branches"])
        files.append(FileCoverage(
            file=rel, num_statements=summary["num_statements"],
            covered_statements=summary["covered_lines"], num_branches=executed + missing,
            covered_branches=executed))
        text, where = _line_reader(path), _functions(path)
        missing_lines = set(data["missing_lines"])
        misses += [Miss(file=rel, line=n, source=text(n), function=where.get(n, ""))
                   for n in sorted(missing_lines)]
        # A branch from a line that never ran is implied by that line: list it once.
        misses += [Miss(file=rel, line=a, target=b, source=text(a), function=where.get(a, ""))
                   for a, b in sorted(data["missing_branches"]) if a not in missing_lines]
    misses.sort(key=lambda m: (m.file, m.line, m.target is not None, m.target or 0))
    return EngineCoverage(matrix=str(matrix), pattern=pattern, num_cells=raw["cells"],
                          statuses=raw["statuses"], files=tuple(files), misses=tuple(misses),
                          exclusions=engine_exclusions(),
                          unmarked=tuple(raw.get("unmarked", (0, 0))))


def engine_exclusions() -> tuple[Exclusion, ...]:
    """Every marked line of the engine. Raises ValueError for a reason not in REASONS."""
    found = []
    for path in sorted(ENGINE_DIR.rglob("*.py")):  # the engine is in rooms (subfolders)
        rel = str(path.relative_to(PROJECT_ROOT))
        for n, text in enumerate(path.read_text().splitlines(), 1):
            marker = MARKER.search(text)
            if marker is None:
                continue
            kind, tag = marker.groups()
            if tag not in REASONS:
                raise ValueError(f"{rel}:{n}: unknown coverage reason {tag!r}; use one of "
                                 f"{', '.join(REASONS)} or add it to REASONS with why")
            found.append(Exclusion(file=rel, line=n, kind=kind, tag=tag,
                                   source=text.split("#")[0].strip()))
    return tuple(found)


def _functions(path: Path) -> dict[int, str]:
    """Line -> qualified name of the innermost function around it."""
    import ast

    found: dict[int, str] = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    for n in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                        found[n] = name  # inner defs visit later and overwrite
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text()), "")
    return found


def _line_reader(path: Path):
    lines = path.read_text().splitlines()
    return lambda n: lines[n - 1].strip() if 0 < n <= len(lines) else ""


def verdict(result: EngineCoverage, threshold: float) -> tuple[bool, str]:
    """(passed, the line that says why)."""
    if result.unsound:
        bad = ", ".join(f"{n} {s}" for s, n in sorted(result.unsound.items()))
        return False, (f"not a figure: {bad} cells (the engine or the goldens are broken); "
                       "fix them first (`batchlab matrix run`)")
    if result.branch_percent < threshold:
        return False, (f"below the gate: {result.branch_percent:.2f}% < {threshold:g}% of "
                       "branches; cover or justify the misses listed (docs/coverage.md)")
    return True, f"at or above the gate ({threshold:g}% of branches)"
