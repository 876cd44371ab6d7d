"""The model x scenario grid every printer shows."""

from __future__ import annotations

from collections import defaultdict

from batchlab.cells.result import CellResult
from batchlab.status import worst


def status_table(results: list[CellResult]):
    """(models, scenarios, {(model, scenario): mark}) in first-seen order; a grid cell
    with several paths shows the mark of its worst status."""
    by_key = defaultdict(list)
    for r in results:
        by_key[(r.model, r.scenario)].append(r.status)
    models = list(dict.fromkeys(r.model for r in results))
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    return models, scenarios, {k: worst(v).mark for k, v in by_key.items()}

