"""A row's own token budget (outside tester round 3): the matrix key that sets it and the
scheduler finishing each row on its own ``max_tokens``."""

from __future__ import annotations

import pytest

from batchlab.cells.spec import expand
from batchlab.engine.core.batch import Request
from batchlab.engine.core.scheduler import Scheduler
from batchlab.zoo import load


def _cell(prompts: dict) -> dict:
    return {"cell": [{"model": "llama", "script": "budgets", "steps": 7, "prompts": prompts,
                      "events": ["insert " + ",".join(prompts) + " at 0"]}]}


def test_a_rows_max_tokens_overrides_the_cells_steps():
    cell = expand(_cell({"A": {"length": 3, "max_tokens": 2}, "B": {"length": 2}}))[0]
    assert [(r.name, r.max_tokens) for r in cell.rows] == [("A", 2), ("B", 7)]
    # the budget is part of the row's definition, so the golden's digest sees it
    assert cell.rows[0].definition()["max_tokens"] == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3"])
def test_a_bad_max_tokens_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="max_tokens of 'A' must be an integer >= 1"):
        expand(_cell({"A": {"length": 3, "max_tokens": bad}}))


def test_rows_admitted_together_finish_on_their_own_budgets():
    """C (one id) joins first, so it is the batch's first row: a finish check that read
    its budget for every row would stop A at 4 tokens and B at 4, not 2 and 6."""
    model = load("llama").model
    s = Scheduler(model)
    s.insert([Request(name="A", prompt=(5, 6, 7, 8, 9), max_tokens=2),
              Request(name="B", prompt=(1, 2, 3, 4), max_tokens=6),
              Request(name="C", prompt=(11,), max_tokens=4)])
    counts: dict[str, int] = {}
    finished_at: dict[str, int] = {}
    step = 0
    while s.num_active:
        for e in s.step():
            counts[e.name] = counts.get(e.name, 0) + 1
            if e.finished:
                finished_at[e.name] = step
        step += 1
    assert counts == {"A": 2, "B": 6, "C": 4}
    assert finished_at == {"A": 3, "B": 7, "C": 4}
