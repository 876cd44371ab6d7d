"""The plan of a campaign: a uniform sample of mutants and the engine lines each changes.

mutmut 3 writes every mutant of a function ``f`` as a sibling function
``x_f__mutmut_N`` (``xǁClassǁf__mutmut_N`` for a method) next to an unmutated copy
``..._mutmut_orig``, formatting kept (libcst). Diffing the two, line by line, gives the
lines the mutant changes, counted from the ``def``; the same offset from the original
function's ``def`` is the line in the engine's own file. Coverage records a statement
under its first line, so each changed line is mapped to the statement around it (the
innermost one), which is what gate/mutation_map.py looks up.

The sample is uniform over every mutant of every engine file (``random.Random(seed)``),
so the killed fraction of the sample estimates the whole engine's, with a binomial
interval (``wilson``).
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import random
from pathlib import Path

SEPARATOR = "ǁ"  # mutmut's class separator in mangled names


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of k successes in n trials, as fractions."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def sample_size(margin: float, population: int, p: float = 0.5, z: float = 1.96) -> int:
    """Mutants to sample for a +-margin 95% interval at proportion p (0.5: the worst case),
    with the finite-population correction."""
    n0 = z * z * p * (1 - p) / (margin * margin)
    return math.ceil(n0 / (1 + (n0 - 1) / population))


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """Top-level functions and methods by mutmut's mangled stem (``x_f``, ``xǁCǁf``)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}.{child.name}"] = child
    return found


def _statement_lines(tree: ast.Module) -> list[tuple[int, int, int]]:
    """(first, last, first) of every statement, innermost last when sorted by span."""
    return [(n.lineno, n.end_lineno or n.lineno, n.lineno)
            for n in ast.walk(tree) if isinstance(n, ast.stmt)]


def _statement_of(spans: list[tuple[int, int, int]], line: int) -> int:
    around = [(last - first, first) for first, last, _ in spans if first <= line <= last]
    return min(around)[1] if around else line


def mutant_lines(mutants_root: Path, engine_file: str) -> dict[str, list[int]]:
    """Mutant short name (``x_f__mutmut_3``) -> the engine file's statement lines it changes."""
    original_src = Path(engine_file).read_text()
    original = ast.parse(original_src)
    by_name = _functions(original)
    spans = _statement_lines(original)
    src = (mutants_root / engine_file).read_text()
    tree = ast.parse(src)
    lines = src.splitlines()
    generated: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        nodes = node.body if isinstance(node, ast.ClassDef) else [node]
        for child in nodes:
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) \
                    and "__mutmut_" in child.name:
                generated[child.name] = child

    def text(fn: ast.FunctionDef) -> list[str]:
        return lines[fn.lineno - 1:fn.end_lineno]

    changed: dict[str, list[int]] = {}
    for name, fn in generated.items():
        stem, _, number = name.rpartition("__mutmut_")
        if number == "orig":
            continue
        orig = generated[f"{stem}__mutmut_orig"]
        key = stem.removeprefix("x_") if stem.startswith("x_") else \
            ".".join(stem.split(SEPARATOR)[1:3])
        source_fn = by_name[key]
        a, b = text(orig), text(fn)
        b = [b[0].replace(name, f"{stem}__mutmut_orig"), *b[1:]]  # the names differ, always
        offsets: set[int] = set()
        for tag, i1, i2, _, _ in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
            if tag != "equal":
                offsets.update(range(i1, max(i2, i1 + 1)))
        found = {_statement_of(spans, source_fn.lineno + k) for k in offsets}
        if source_fn.lineno in found:
            # a default argument changed: the def line runs at import, so the killers are
            # the cells that call the function, i.e. that run any statement of its body
            found.discard(source_fn.lineno)
            found.update(n.lineno for n in ast.walk(source_fn)
                         if isinstance(n, ast.stmt) and n is not source_fn)
        found = sorted(found)
        changed[name] = found
    return changed


def plan(mutants_root: Path, files: list[str], size: int | None, seed: int) -> dict:
    """Every mutant of ``files`` with its changed lines, and a uniform sample of ``size``."""
    every = []
    for file in files:
        module = file.removesuffix(".py").replace("/", ".")
        for short, found in sorted(mutant_lines(mutants_root, file).items()):
            every.append({"name": f"{module}.{short}", "file": file,
                          "lines": [[file, n] for n in found]})
    chosen = every if size is None or size >= len(every) else \
        random.Random(seed).sample(every, size)
    return {"generated": len(every), "seed": seed, "size": len(chosen), "mutants": chosen,
            "per_file": {f: sum(1 for m in every if m["file"] == f) for f in files}}


def main() -> None:
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="mutation_plan")
    p.add_argument("--mutants", required=True, help="the folder mutmut wrote (mutants/)")
    p.add_argument("--size", type=int)
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--out", required=True)
    a = p.parse_args(sys.argv[1:])
    files = sorted(str(f) for f in Path("batchlab/engine").rglob("*.py"))
    Path(a.out).write_text(json.dumps(plan(Path(a.mutants), files, a.size, a.seed), indent=0))
