"""The pending seeded bugs: real holes of the default matrix, each caught by the scenario
proposed as a new cell (run live here against BatchGenerator with the cell's settings).

When the default matrix gains a cell matching a pending bug's ``cells``, the last test
fails: move the bug from ``catalog.PENDING`` to ``catalog.CATALOG`` (docs/mutation.md).
"""

import pytest

from batchlab.cli import DEFAULT_MATRIX
from batchlab.engine.config import ScheduleConfig
from batchlab.engine.run import run_script
from batchlab.matrix.cell import Cell, Event, Row
from batchlab.matrix.compare import first_divergence
from batchlab.matrix.runner import select
from batchlab.matrix.scenarios import seeded_prompt
from batchlab.matrix.spec import load_matrix
from batchlab.oracle.batch import run_batch_oracle
from batchlab.selftest.catalog import CATALOG, PENDING
from batchlab.selftest.inject import applied
from batchlab.zoo import load

CAPPED = ScheduleConfig(prefill_batch_size=2, completion_batch_size=3)
CHUNKED = ScheduleConfig(prefill_step_size=4)
CAPPED_ROWS = {"A": 5, "B": 1, "C": 3, "D": 7, "E": 2}
CHUNKED_ROWS = {"A": 11, "B": 3, "C": 6}


def _cell(model, lengths, events, max_tokens):
    rows = tuple(Row(name=n, prompt=seeded_prompt(n, k, 3), max_tokens=max_tokens)
                 for n, k in lengths.items())
    return Cell(model=model, path="l1", batch=len(rows), padding="ragged", script="pending",
                context="unit", rows=rows,
                events=tuple(Event(step=s, action=a, rows=tuple(r.split(",")))
                             for s, a, r in events))


# bug name -> the proposed cells' scenarios, each with its scheduler settings
SCENARIOS = {
    "admit-ignores-prefill-batch-size": [
        (_cell("llama", CAPPED_ROWS, [(0, "insert", "A,B,C,D,E")], 4), CAPPED)],
    "step-ignores-completion-cap": [
        (_cell("llama", CAPPED_ROWS, [(0, "insert", "A,B,C,D,E")], 4), CAPPED)],
    "prefill-ignores-step-size": [
        (_cell("gemma3", CHUNKED_ROWS, [(0, "insert", "A,B"), (1, "insert", "C")], 5),
         CHUNKED)],
    "remove-only-decoding-rows": [  # a row mid-prompt, and a row still queued
        (_cell("llama", CHUNKED_ROWS, [(0, "insert", "A,B"), (1, "insert", "C"),
                                       (1, "remove", "A")], 5), CHUNKED),
        (_cell("llama", CAPPED_ROWS, [(0, "insert", "A,B,C,D,E"), (1, "remove", "E")], 4),
         CAPPED)],
}


def _divergence(cell, config):
    loaded = load(cell.model)
    oracle = run_batch_oracle(cell, loaded.model, loaded.dtype, config)
    engine = run_script(cell, loaded.model, loaded.dtype, config, keep_values=False)
    return first_divergence(oracle, engine, [r.name for r in cell.rows])


def test_every_pending_bug_has_a_scenario_and_a_proposed_cell():
    assert sorted(SCENARIOS) == sorted(b.name for b in PENDING)
    assert all(b.proposed_cell and b.description for b in PENDING)
    assert not {b.name for b in PENDING} & {b.name for b in CATALOG}


@pytest.mark.parametrize("bug", PENDING, ids=[b.name for b in PENDING])
def test_the_proposed_cell_catches_the_pending_bug(bug):
    for cell, config in SCENARIOS[bug.name]:
        assert _divergence(cell, config) is None  # the control: the engine is exact here
        with applied(bug.inject()):
            caught = _divergence(cell, config)
        assert caught is not None, f"{bug.name} is not caught by {cell.events}"


def test_no_default_cell_catches_them_yet():
    """Fails once the lead's new cells land: then promote the bug to CATALOG."""
    cells = load_matrix(DEFAULT_MATRIX)
    promoted = [b.name for b in PENDING if select(cells, b.cells, None)]
    assert promoted == [], f"move {promoted} from catalog.PENDING to CATALOG"
