"""The seeded bugs: batching mistakes that really happened (or nearly did), each a record.

A record names the bug, says where it comes from, picks the default-matrix cells that
exercise it (``cells``: a ``batchlab.matrix.runner.select`` pattern: substring or glob,
comma = or) and points at its injector (``inject``: returns the patches to apply).
Candidates stay focused (a handful of cells that hit the code path) so the whole
self-test runs in about a minute; the gate catches a bug when any candidate fails.

``history`` says where a bug comes from: "record" = it happened (shared/seeds/
parallel-slots.md, mlx-bun's batching design record, cited by file:line); "rule" = a rule
of shared/FACTS.md or an engine docstring that the bug breaks (a slip that did not make
the record but that every batching port risks).
"""

from __future__ import annotations

from batchlab.selftest.catalog_engine import ENGINE_BUGS
from batchlab.selftest.catalog_rounds import ROUND_BUGS
from batchlab.selftest.record import SeededBug

CATALOG: tuple[SeededBug, ...] = ENGINE_BUGS + ROUND_BUGS


def select_bugs(pattern: str | None) -> list[SeededBug]:
    """Bugs whose name contains ``pattern`` (all when None)."""
    bugs = [b for b in CATALOG if not pattern or pattern in b.name]
    if not bugs:
        names = ", ".join(b.name for b in CATALOG)
        raise ValueError(f"no seeded bug matches --bug {pattern!r}; known: {names}")
    return bugs


__all__ = ["CATALOG", "SeededBug", "select_bugs"]
