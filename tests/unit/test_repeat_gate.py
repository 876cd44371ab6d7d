"""``matrix run --repeat``: the subject runs each cell twice, and two runs that differ FAIL
before any comparison with the oracle (on the H200, two identical runs of a B=256 decode
past 256 keys gave different tokens: reports/bench/cuda-sm90/issue28-kv/)."""

import dataclasses
import json

import pytest

import batchlab.matrix.engine_run as engine_run
from batchlab import cli
from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.commands import matrix as matrix_command
from batchlab.golden.store import Golden, Stamp
from batchlab.matrix import evaluate
from batchlab.matrix.evaluate import Reference, evaluate_cell, rerun_command
from batchlab.status import Status

CELL_ID = "l1/llama/B3/ragged/join-evict/ctx-short"
CELL = select(load_matrix("matrices/quick.toml"), CELL_ID, None)[0]
REPEAT = Reference(matrix="matrices/quick.toml", goldens="goldens", repeat=True)


@pytest.fixture(scope="module")
def engine_bits():
    return engine_run.run_cell(CELL)


def golden_of(trajectory) -> Golden:
    return Golden(stamp=Stamp(cell_id=CELL.id, definition_digest="", backend="", versions={},
                              fingerprint="", schedule={}),
                  oracle="test", dtype="bfloat16", serial_check="ok", oracle_bug=None,
                  trajectory=trajectory)


def with_one_digest_changed(trajectory, row, index):
    steps = list(trajectory.rows[row])
    steps[index] = dataclasses.replace(steps[index], digest="0" * 16)
    return dataclasses.replace(trajectory, rows={**trajectory.rows, row: tuple(steps)})


def test_a_subject_that_repeats_itself_is_judged_as_usual(monkeypatch, engine_bits):
    runs = []
    monkeypatch.setattr(evaluate, "_reference", lambda cell, ref, judging: golden_of(engine_bits))
    monkeypatch.setattr(evaluate, "_run", lambda cell, ref: runs.append(1) or engine_bits)
    result = evaluate_cell(CELL, REPEAT)
    assert result.status == Status.PASS and len(runs) == 2
    plain = evaluate_cell(CELL, dataclasses.replace(REPEAT, repeat=False))
    assert plain.status == Status.PASS and len(runs) == 3


def test_two_runs_that_differ_fail_even_when_the_first_equals_the_oracle(monkeypatch,
                                                                         engine_bits):
    runs = iter([engine_bits, with_one_digest_changed(engine_bits, "B", 2)])
    monkeypatch.setattr(evaluate, "_reference", lambda cell, ref, judging: golden_of(engine_bits))
    monkeypatch.setattr(evaluate, "_run", lambda cell, ref: next(runs))
    result = evaluate_cell(CELL, REPEAT)
    assert result.status == Status.FAIL
    assert result.detail.startswith("not repeatable: the subject's second run differs from "
                                    "its first, row B token #2")
    assert result.divergence["row"] == "B" and result.divergence["index"] == 2


def test_the_rerun_command_repeats_too():
    assert rerun_command(CELL, REPEAT) == ("batchlab matrix run --matrix matrices/quick.toml "
                                           f"--repeat --filter '{CELL_ID}'")
    assert "--repeat" not in rerun_command(CELL, dataclasses.replace(REPEAT, repeat=False))


def test_the_cli_runs_each_cell_twice(monkeypatch, tmp_path):
    runs = []
    real = engine_run.run_cell

    def counted(cell, *args, **kw):
        runs.append(cell.id)
        return real(cell, *args, **kw)

    def in_process(cells, ref, jobs, on_result):  # workers would not see the patch above
        for cell in cells:
            on_result(evaluate_cell(cell, ref))

    monkeypatch.setattr(engine_run, "run_cell", counted)
    monkeypatch.setattr(matrix_command, "run_cells", in_process)
    code = cli.main(["matrix", "run", "--matrix", "matrices/quick.toml", "--filter", CELL_ID,
                     "--jobs", "1", "--repeat", "--report", str(tmp_path)])
    assert code == 0 and runs == [CELL_ID, CELL_ID]
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in results] == ["PASS"]
    assert "--repeat" in results[0]["rerun"]
