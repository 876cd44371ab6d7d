"""An ORACLE-BUG cell can still FAIL: the engine must do what the oracle's batch mode did.

The golden here is built in the test (the oracle's evidence is a given: a bug dict and,
where batch mode ran, its trajectory); the engine's bits are a real run of a quick cell.
"""

import dataclasses

import pytest

import batchlab.matrix.engine_run as engine_run
from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.golden.store import Golden, Stamp
from batchlab.matrix import evaluate
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.status import Status

CELL = select(load_matrix("matrices/quick.toml"), "l1/llama/B3/ragged/join-evict/ctx-short",
              None)[0]
REF = Reference(matrix="matrices/quick.toml", goldens="goldens")
BUG = {"kind": "serial-mismatch", "rows": ["B"], "first_step": 2,
       "detail": "row B token 2: batch 7 vs serial 9"}
BUG_TEXT = ("oracle self-inconsistent (serial-mismatch): rows B from token #2: "
            "row B token 2: batch 7 vs serial 9")


@pytest.fixture(scope="module")
def engine_bits():
    return engine_run.run_cell(CELL)


def judged(monkeypatch, trajectory, bug=BUG):
    golden = Golden(stamp=Stamp(cell_id=CELL.id, definition_digest="", backend="", versions={},
                                fingerprint="", schedule={}),
                    oracle="test", dtype="bfloat16", serial_check="oracle-bug", oracle_bug=bug,
                    trajectory=trajectory)
    monkeypatch.setattr(evaluate, "_reference", lambda cell, ref, judging: golden)
    return evaluate_cell(CELL, REF)


def with_one_digest_changed(trajectory, row, index):
    steps = list(trajectory.rows[row])
    steps[index] = dataclasses.replace(steps[index], digest="0" * 16)
    return dataclasses.replace(trajectory, rows={**trajectory.rows, row: tuple(steps)})


def test_engine_equal_to_the_buggy_batch_bits_is_oracle_bug(monkeypatch, engine_bits):
    result = judged(monkeypatch, engine_bits)
    assert result.status == Status.ORACLE_BUG
    assert result.detail == f"{BUG_TEXT} (engine equals the oracle's (buggy) batch bits)"


def test_engine_one_digest_away_from_the_batch_bits_fails(monkeypatch, engine_bits):
    result = judged(monkeypatch, with_one_digest_changed(engine_bits, "B", 1))
    assert result.status == Status.FAIL
    assert result.divergence["row"] == "B" and result.divergence["index"] == 1
    assert result.divergence["what"] == "bits"
    assert result.detail.startswith("row B token #1 (step ")
    assert result.detail.endswith("; engine differs from the oracle's batch bits, which are "
                                  f"self-inconsistent too: {BUG_TEXT}")


def test_engine_that_crashes_where_batch_mode_ran_is_an_error(monkeypatch, engine_bits):
    def crash(cell):
        raise ValueError("broadcast shapes")

    monkeypatch.setattr(engine_run, "run_cell", crash)
    result = judged(monkeypatch, engine_bits)
    assert result.status == Status.ERROR
    assert result.detail == "engine crashed: ValueError: broadcast shapes"


CRASH_BUG = {"kind": "batch-crash", "rows": ["A", "B", "C"], "first_step": None,
             "detail": "BatchGenerator raised ValueError"}
CRASH_TEXT = ("oracle self-inconsistent (batch-crash): rows A,B,C: "
              "BatchGenerator raised ValueError")


def test_batch_mode_crashed_and_the_engine_raises_too_is_oracle_bug(monkeypatch):
    def crash(cell):
        raise ValueError("broadcast shapes")

    monkeypatch.setattr(engine_run, "run_cell", crash)
    result = judged(monkeypatch, None, CRASH_BUG)
    assert result.status == Status.ORACLE_BUG
    assert result.detail == (f"{CRASH_TEXT} (the engine raises too: ValueError; the broken "
                             "code is the shared model module)")


def test_batch_mode_crashed_but_the_engine_ran_fails(monkeypatch, engine_bits):
    monkeypatch.setattr(engine_run, "run_cell", lambda cell: engine_bits)
    result = judged(monkeypatch, None, CRASH_BUG)
    tokens = sum(len(v) for v in engine_bits.rows.values())
    assert result.status == Status.FAIL and result.tokens == tokens
    assert result.detail == (f"{CRASH_TEXT}; but the engine ran without crashing ({tokens} "
                             "tokens): on this path it must behave as mlx-lm's batch mode "
                             "does, so these bits are not gated")
