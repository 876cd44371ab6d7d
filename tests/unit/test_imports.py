"""The import graph of the batchlab package: no cycles, and layers that point one way.

Read from the source (``ast``), not by importing. Every import counts, function-level
(lazy) ones included: a lazy import is an arrow like any other, and two modules that
import each other lazily are a circle all the same. Three checks:

- every package (and the engine's rooms: core, caches, kernels, paths) has a rule in
  ``ALLOWED`` naming the packages it may import, and imports nothing else;
- no cycle among modules, and none among packages;
- only the entry point imports the CLI.

    python tests/unit/test_imports.py     # prints the packages each package imports
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "batchlab"

# Packages, lowest first. A package may import itself and the packages named here.
BASE = ("trajectory", "backend", "atomic", "display", "defaults", "status")
ENGINE = ("engine", "engine.kernels", "engine.caches", "engine.core", "engine.paths")
ALLOWED = {
    **{m: set() for m in BASE},
    "engine": {*BASE},  # engine/__init__.py
    "engine.kernels": {*BASE, "engine"},
    "engine.caches": {*BASE, "engine"},
    "engine.core": {*BASE, "engine", "engine.caches"},
    "engine.paths": {*BASE, "engine", "engine.kernels", "engine.caches", "engine.core"},
    "gguf": {*BASE},
    "zoo": {*BASE, "gguf"},
    "judging": {*BASE, *ENGINE},
    "cells": {*BASE, *ENGINE, "zoo", "judging"},
    "golden": {*BASE, "zoo", "judging", "cells"},
    "oracle": {*BASE, *ENGINE, "zoo", "judging", "cells", "golden"},
    "report": {*BASE, "cells"},
    # the engines under test behind one protocol; oracle: mlx-lm's sampler and processor
    # builders, so a row means the same to the BatchGenerator subject as to the oracle
    "subjects": {*BASE, *ENGINE, "zoo", "cells", "oracle"},
    "matrix": {*BASE, *ENGINE, "zoo", "judging", "cells", "golden", "oracle", "report",
               "subjects"},
    "selftest": {*BASE, *ENGINE, "zoo", "judging", "cells", "golden", "oracle", "report",
                 "subjects", "matrix"},
    "gate": {*BASE, *ENGINE, "zoo", "judging", "cells", "golden", "oracle", "report",
             "subjects", "matrix", "selftest"},
    "lab": {*BASE, *ENGINE, "zoo", "judging", "cells"},
    "bench": {*BASE, *ENGINE, "zoo", "judging", "cells", "oracle"},
    "serve": {*BASE, *ENGINE, "zoo"},
    # a running OpenAI-compatible server held to the goldens over HTTP (no engine)
    "http_gate": {*BASE, "zoo", "cells", "golden"},
    "commands": {*BASE, *ENGINE, "gguf", "zoo", "judging", "cells", "golden", "oracle",
                 "report", "subjects", "matrix", "selftest", "gate", "lab", "bench", "serve",
                 "http_gate"},
    "cli": {*BASE, "commands", "selftest", "serve"},
    "__main__": {"cli"},
}
# Edges that break a rule today, each with who removes it. The test fails when one of
# them disappears without being struck from this list, so the list cannot go stale.
KNOWN: set[tuple[str, str]] = set()  # none today


def module_files() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = module_files()


def _target(name: str) -> str | None:
    """The batchlab module an imported dotted name loads (its longest known prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _top_level(body: list[ast.stmt]):
    """Statements that run when the module is imported (top-level ``if``/``try``
    blocks included, ``if TYPE_CHECKING:`` not)."""
    for node in body:
        if isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                yield from _top_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body + node.orelse + node.finalbody
                                  + [s for h in node.handlers for s in h.body])
        else:
            yield node


def imports_of(module: str, *, lazy: bool) -> set[str]:
    """The batchlab modules ``module`` imports: at module level, or (``lazy``) anywhere."""
    tree = ast.parse(MODULES[module].read_text())
    nodes = ast.walk(tree) if lazy else _top_level(tree.body)
    names = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{module}: use absolute imports (batchlab.x), not relative")
            names += [f"{node.module}.{a.name}" for a in node.names]
    out = {t for t in map(_target, names) if t is not None and t != module}
    # importing batchlab.a.b runs batchlab/a/__init__.py first
    for t in list(out):
        parent = t.rpartition(".")[0]
        while parent and parent != "batchlab":
            if parent != module and not module.startswith(parent + "."):
                out.add(parent)
            parent = parent.rpartition(".")[0]
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> str:
    """The package a module belongs to: ``engine.core`` for batchlab/engine/core/*, the
    top-level package for the rest, the module's own name for batchlab/*.py."""
    parts = module.split(".")[1:]
    if not parts:
        return "batchlab"
    if parts[0] == "engine" and len(parts) > 2:
        return f"engine.{parts[1]}"
    if len(parts) > 1 or MODULES[module].name == "__init__.py":
        return parts[0]
    return parts[0]


def test_the_reader_tells_module_level_imports_from_lazy_ones():
    """serve/server.py imports the engine's path registry only inside ``start_server``."""
    assert "batchlab.engine.paths.registry" in imports_of("batchlab.serve.server", lazy=True)
    assert "batchlab.engine.paths.registry" not in imports_of("batchlab.serve.server", lazy=False)
    # importing batchlab.zoo.load runs batchlab/zoo/__init__.py first
    assert {"batchlab.zoo", "batchlab.zoo.load"} <= imports_of("batchlab.serve.server", lazy=True)


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_batchlab_modules():
    graph = {m: imports_of(m, lazy=True) for m in MODULES}
    assert cycles(graph) == []


def package_graph() -> dict[str, set[str]]:
    graph = defaultdict(set)
    for module, target in _edges():
        if layer(target) != layer(module):
            graph[layer(module)].add(layer(target))
    return graph


def test_no_import_cycle_among_packages():
    assert cycles(package_graph()) == []


def test_every_package_has_a_rule():
    assert sorted({layer(m) for m in MODULES} - set(ALLOWED) - {"batchlab"}) == []


def _edges() -> set[tuple[str, str]]:
    return {(m, t) for m in MODULES for t in imports_of(m, lazy=True)}


def test_layers_import_only_downward():
    broken = set()
    for module, target in _edges():
        allowed = ALLOWED.get(layer(module), set())
        if layer(target) != layer(module) and layer(target) not in allowed:
            broken.add((module, target))
    assert sorted(broken - KNOWN) == []


def test_only_the_entry_point_imports_the_cli():
    """Commands' shared constants live in batchlab.defaults and batchlab.display."""
    importers = {(m, t) for m, t in _edges() if t == "batchlab.cli" and m != "batchlab.__main__"}
    assert sorted(importers - KNOWN) == []


def test_known_exceptions_still_exist():
    """Strike an exception from KNOWN when its edge is gone."""
    assert sorted(KNOWN - _edges()) == []


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_every_layer_named_in_the_rules_exists(name: str):
    assert any(layer(m) == name for m in MODULES), f"no module in layer {name}: fix ALLOWED"


def layer_table() -> dict[str, list[str]]:
    """Per layer, the other layers' modules it imports (lazy imports included)."""
    table = defaultdict(set)
    for module, target in _edges():
        if layer(target) != layer(module):
            table[layer(module)].add(target)
    # a package shown only where none of its modules is (its __init__ runs either way)
    return {k: sorted(t for t in v if not any(u.startswith(t + ".") for u in v))
            for k, v in sorted(table.items())}


if __name__ == "__main__":
    for name, targets in sorted(package_graph().items()):
        print(f"{name} -> {', '.join(sorted(targets))}")
    sys.exit(0)


def test_the_cli_parses_without_the_server_stack():
    """Every command but serve and load runs where fastapi/uvicorn/openai are absent (the
    H200 machine has no package index): the parser must not import them."""
    import subprocess
    import sys

    code = ("import builtins\nreal = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name.split('.')[0] in ('uvicorn', 'fastapi', 'pydantic', 'openai',\n"
            "                              'prometheus_client', 'starlette'):\n"
            "        raise ImportError('blocked ' + name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "from batchlab.cli import build_parser\n"
            "build_parser().parse_args(['matrix', 'list'])\nprint('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
