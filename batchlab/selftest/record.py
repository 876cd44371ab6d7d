"""A seeded bug as a record, and the cell patterns the catalog's entries share.

``bug`` builds a record whose description is its injector's docstring; the entries live
in ``catalog_engine.py`` (the engine's first rounds: positions, joins, evictions,
sampling, the schedule, history, quantized KV) and ``catalog_rounds.py`` (the gate's
later rounds: invariance, paging, mutation testing, the outside testers, the zoo,
subjects and peers); ``catalog.py`` joins them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from batchlab.selftest.inject import Patch


@dataclass(frozen=True, slots=True, kw_only=True)
class SeededBug:
    name: str
    description: str
    history: str
    cells: str  # select() pattern over default-matrix ids
    inject: Callable[[], list[Patch]]
    # How the gate must see it. A silent bug that only ever shows up as ERROR is more
    # likely an injector broken by an engine change (a TypeError in the patch) than a catch.
    caught_as: str = "FAIL"
    # the matrix the candidates come from, relative to the project root; None: the one
    # the self-test runs (the default matrix). The invariance bugs use the solo gate's.
    matrix: str | None = None
    # where the bug lives: "engine" (patches batchlab's engine: reaches only its subject),
    # "subject" (an adapter's bookkeeping: wraps any subject, a peer plays it by name),
    # "peer" (a process peer's fault: ERROR for its first candidate, the rest must PASS),
    # "accounting" (patches batchlab's engine where only the in-process subject's row-cost
    # check of a row-cost cell looks: no trajectory shows it, so a peer or files cannot)
    kind: str = "engine"


def bug(name: str, cells: str, inject: Callable[[], list[Patch]], history: str,
         caught_as: str = "FAIL", matrix: str | None = None, kind: str = "engine") -> SeededBug:
    """The description is the injector's docstring: one text, next to the code it tells."""
    doc = " ".join((inject.__doc__ or "").split())
    return SeededBug(name=name, description=doc, history=history, cells=cells, inject=inject,
                     caught_as=caught_as, matrix=matrix, kind=kind)


INVARIANT_MATRIX = "matrices/invariant.toml"


RAGGED = "l1/{m}/B3/ragged/static/ctx-short"
JOINS = "l1/{m}/B3/ragged/join/ctx-short,l1/{m}/B3/ragged/staggered/ctx-short"
EVICTS = "l1/{m}/B3/ragged/evict/*,l1/{m}/B3/ragged/join-evict/*"
WRAPS = "l1/{m}/B3/ragged/*/ctx-wrap"
B8 = "l1/{m}/B8/ragged/static/ctx-short"


def over(template: str, *models: str) -> str:
    """``template`` for each model, comma-joined (select() reads a comma as or)."""
    return ",".join(template.format(m=m) for m in models)
