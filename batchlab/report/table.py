"""The model x scenario grid every printer shows."""

from __future__ import annotations

from collections import Counter, defaultdict

from batchlab.matrix.result import CellResult

# One mark per status, most severe first: a grid cell with several paths shows the worst.
SEVERITY = ["ERROR", "FAIL", "STALE", "NO-GOLDEN", "ORACLE-BUG", "UNSUPPORTED", "PASS"]
MARK = {"PASS": "ok", "FAIL": "FAIL", "ERROR": "ERR", "STALE": "stale",
        "NO-GOLDEN": "none", "ORACLE-BUG": "o-bug", "UNSUPPORTED": "unsup"}


def worst(statuses) -> str:
    return min(statuses, key=SEVERITY.index)


def status_table(results: list[CellResult]):
    """(models, scenarios, {(model, scenario): mark}) in first-seen order."""
    by_key = defaultdict(list)
    for r in results:
        by_key[(r.model, r.scenario)].append(r.status)
    models = list(dict.fromkeys(r.model for r in results))
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    return models, scenarios, {k: MARK[worst(v)] for k, v in by_key.items()}


def counts_by_model(results: list[CellResult]) -> dict[str, Counter]:
    out: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        out[r.model][r.status] += 1
    return out
