"""``batchlab gate coverage``: the engine's branch coverage under a matrix, as a gate."""

import json
from argparse import Namespace

import pytest
from rich.console import Console

from batchlab.cli import DEFAULT_GOLDENS, build_parser
from batchlab.commands.gate import coverage_command
from batchlab.defaults import PROJECT_ROOT
from batchlab.gate.coverage import EngineCoverage, FileCoverage, _record, measure, verdict

# from the smoke matrix (19 cells): expanding the default one (2236 cells) under the
# tracer took 4 s of the fixture's 9. (Its sampler and processor settings run a few more
# lines of engine/core while it is read: figures, not what is checked here, differ.)
QUICK = PROJECT_ROOT / "matrices" / "quick.toml"
ONE_CELL = "l1/llama/B1/ragged/static/ctx-short"


@pytest.fixture(scope="module")
def one_cell():
    return measure(QUICK, DEFAULT_GOLDENS, ONE_CELL)


def test_one_llama_cell_runs_fresh_and_never_reaches_the_ring_or_the_state(one_cell):
    assert one_cell.num_cells == 1 and one_cell.statuses == {"PASS": 1}
    by_file = {f.file: f for f in one_cell.files}
    # a fresh interpreter: the engine's import-time lines count (config.py is only those)
    assert by_file["batchlab/engine/core/config.py"].covered_statements == \
        by_file["batchlab/engine/core/config.py"].num_statements > 0
    # llama has no sliding window and no SSM state: not one branch of ring.py or state.py
    assert by_file["batchlab/engine/caches/ring.py"].covered_branches == 0
    assert by_file["batchlab/engine/caches/state.py"].covered_branches == 0
    assert by_file["batchlab/engine/core/scheduler.py"].covered_branches > 0
    # B1 never evicts: Scheduler.remove's body is listed, as file:line with its source
    removes = [m for m in one_cell.misses if m.file == "batchlab/engine/core/scheduler.py"
               and m.source == "gone = set(names)"]
    assert len(removes) == 1 and removes[0].target is None
    assert removes[0].function == "Scheduler.remove"
    assert 0 < one_cell.branch_percent < 100


def test_the_gate_fails_below_its_threshold_and_passes_at_or_above(one_cell):
    assert verdict(one_cell, 100.0)[0] is False
    assert "below the gate" in verdict(one_cell, 100.0)[1]
    assert verdict(one_cell, one_cell.branch_percent)[0] is True
    assert verdict(one_cell, 0.0)[0] is True


def test_a_figure_over_failing_cells_is_no_figure():
    broken = EngineCoverage(matrix="m.toml", pattern=None, num_cells=2,
                            statuses={"PASS": 1, "FAIL": 1}, misses=(),
                            files=(FileCoverage(file="f.py", num_statements=1,
                                                covered_statements=1, num_branches=2,
                                                covered_branches=2),))
    assert broken.branch_percent == 100.0
    ok, why = verdict(broken, 0.0)
    assert ok is False and why.startswith("not a figure: 1 FAIL cells")


def test_a_branch_from_a_line_that_never_ran_is_listed_once(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f(x):\n    if x:\n        return 1\n    return 2\n")
    raw = {"cells": 1, "statuses": {"PASS": 1}, "files": {str(source): {
        "summary": {"num_statements": 4, "covered_lines": 2, "num_branches": 2,
                    "covered_branches": 1},
        "missing_lines": [3], "missing_branches": [[2, 3]], "executed_branches": [[2, 4]]}}}
    result = _record(raw, tmp_path / "m.toml", None)
    assert [(m.line, m.target, m.source, m.function) for m in result.misses] == [
        (2, 3, "if x:", "f"), (3, None, "return 1", "f")]
    assert result.branch_percent == 50.0
    assert result.misses[0].describe().endswith("branch to line 3 never taken: if x:")


def test_the_command_writes_its_report_and_exits_1_at_threshold_100(tmp_path, monkeypatch,
                                                                   one_cell):
    monkeypatch.setattr("batchlab.commands.gate.measure", lambda *a: one_cell)
    args = build_parser().parse_args(["gate", "coverage", "--filter", ONE_CELL,
                                      "--threshold", "100", "--report", str(tmp_path)])
    with open(tmp_path / "out.txt", "w") as out:
        console = Console(file=out, width=200)
        assert coverage_command(args, console) == 1
        args = Namespace(**{**vars(args), "threshold": 0.0})
        assert coverage_command(args, console) == 0
    saved = json.loads((tmp_path / "engine.json").read_text())
    assert saved["cells"] == 1 and saved["filter"] == ONE_CELL
    assert saved["branch_percent"] == round(one_cell.branch_percent, 3)
    assert len(saved["misses"]) == len(one_cell.misses)
    text = (tmp_path / "out.txt").read_text()
    assert "gate FAILED" in text and "gate OK" in text
    assert all(m.describe() in text for m in one_cell.misses)
    assert "## Uncovered" in (tmp_path / "engine.md").read_text()
