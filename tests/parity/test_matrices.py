"""The matrix gates: every cell of each matrix below, one test per cell.

    default.toml    against the committed CPU goldens; ORACLE-BUG expected only for the
                    cells pinned in gate_pins.json; UNSUPPORTED skipped with its reason
    invariant.toml  every row against itself run alone (the solo reference), then its
                    greedy rows against the batch oracle's golden (the second judge);
                    anything but PASS fails

A pinned ORACLE-BUG is an expected failure (the oracle disagrees with itself, the golden
holds the evidence, the engine equals the oracle's batch bits); an ORACLE-BUG outside the
pin fails, and so does a pinned cell that is anything else. Everything else fails with
the first divergence and the rerun command. ``pytest tests/parity -k 'gemma3 and B4'``
selects cells; the ids are ``test_cell[<matrix>:<cell id>]``.

matrices/real.toml (the real model, 32 decode steps a cell: minutes on a CPU) is not run
here: CI runs it as its own step after the README's test command (.ci/run,
docs/ci.md); the default matrix keeps short real-model cells of each of its features.
To add a gated matrix, add a Gate.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from control_results import control_result
from loaded_matrices import matrix_cells

from batchlab.backend import backend_key
from batchlab.cells.cell import Cell
from batchlab.defaults import DEFAULT_GOLDENS
from batchlab.golden.pins import WRITE_COMMAND, read_pins
from batchlab.judging.judging import Reference as JudgeReference
from batchlab.judging.judging import judging_for
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.status import Status


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    name: str  # matrices/<name>.toml
    skips_unsupported: bool  # UNSUPPORTED skips (True) or fails (False)
    pinned_oracle_bugs: frozenset[str] = frozenset()  # the only cells that may be ORACLE-BUG

    @property
    def matrix(self) -> str:
        return f"matrices/{self.name}.toml"

    def cells(self) -> list[Cell]:
        return matrix_cells(self.matrix)


GATES = (
    Gate(name="default", skips_unsupported=True,
         pinned_oracle_bugs=frozenset(read_pins().oracle_bug.get(backend_key(), ()))),
    Gate(name="invariant", skips_unsupported=False),
)
CELLS = {gate.name: gate.cells() for gate in GATES}
REAL = matrix_cells("matrices/real.toml")
INVARIANT_FAMILIES = {"llama", "qwen3", "minicpm", "gemma3", "gemma4-12b", "gemma4-e4b",
                      "gemma4-26b", "gpt-oss", "qwen3-moe", "qwen3.5", "mamba2", "lfm2",
                      "smollm2-135m"}


def test_the_invariant_matrix_covers_what_issue_20_asks():
    cells = CELLS["invariant"]
    assert len(cells) == 47
    assert {c.path for c in cells} == {"invariant"}
    assert judging_for("invariant").reference is JudgeReference.SOLO
    assert {c.model for c in cells} == INVARIANT_FAMILIES
    needles = [c for c in cells if c.padding == "needle"]
    assert {c.model for c in needles} == INVARIANT_FAMILIES - {"smollm2-135m"}
    assert {c.batch for c in needles} == {16, 32}
    assert {c.script for c in needles} == {"join-evict", "staggered", "evict-many", "trickle"}
    assert {c.seed for c in needles} == {0, 1, 2, 3}
    bs_n = [c for c in cells if c.script == "static"]
    assert {c.model for c in bs_n} == INVARIANT_FAMILIES - {"smollm2-135m"}
    assert {c.batch for c in bs_n} == {8}


def test_the_real_matrix_covers_what_issue_16_asks():
    l1 = [c for c in REAL if c.path == "l1"]
    assert len(l1) == 10
    assert {c.model for c in REAL} == {"smollm2-135m"}
    assert {c.batch for c in l1} == {1, 2, 3, 4, 8}
    assert {c.script for c in l1} >= {"static", "join", "evict", "join-evict"}
    assert {c.padding for c in l1} == {"chat", "corpus-equal", "corpus-ragged"}
    assert min(c.steps for c in l1) >= 32
    assert [c.id for c in REAL if c.path != "l1"] == [
        "invariant-blocked/smollm2-135m/B6/needle/join-evict/ctx-short/steps6"]


def test_the_default_matrix_keeps_short_real_model_cells_of_the_real_matrixs_features():
    """real.toml runs outside this suite (CI's next step); the default matrix keeps each of
    its paddings and scripts (join-evict does a join and an evict) in a few steps. Its
    invariant-blocked cell stays there alone: a blocked forward costs 8 rows of the real
    model's quantized matmul on the CPU, so the default matrix reaches 4-bit weights
    under that path with the zoo's 4-bit llama, bit-exact against BatchGenerator too."""
    short = [c for c in CELLS["default"] if c.model == "smollm2-135m"]
    l1, real_l1 = ([c for c in cells if c.path == "l1"] for cells in (short, REAL))
    assert {c.padding for c in l1} == {c.padding for c in real_l1}
    assert {c.script for c in l1} == {c.script for c in real_l1} - {"join", "evict"}
    assert {c.path for c in short} >= {c.path for c in REAL} - {"invariant-blocked"}
    assert max(c.steps for c in short) <= 10
    q4 = {(c.path, c.batch) for c in CELLS["default"] if c.model == "llama-q4"}
    assert {("l1", 4), ("invariant-blocked", 3), ("invariant-blocked", 12)} <= q4


@pytest.mark.parity
@pytest.mark.parametrize(("gate", "cell"), [(g, c) for g in GATES for c in CELLS[g.name]],
                         ids=[f"{g.name}:{c.id}" for g in GATES for c in CELLS[g.name]])
def test_cell(gate, cell):
    ref = Reference(matrix=gate.matrix, goldens=DEFAULT_GOLDENS)
    # the self-test's control ran this very evaluation in this process (control_results.py)
    result = control_result(cell, ref) or evaluate_cell(cell, ref)
    what = f"{result.status}: {result.detail}\n{result.traceback or ''}\nrerun: {result.rerun}"
    pinned = cell.id in gate.pinned_oracle_bugs
    if result.status == Status.ORACLE_BUG:
        if pinned:
            pytest.xfail(result.detail)
        pytest.fail(f"ORACLE-BUG but not pinned in tests/parity/gate_pins.json for "
                    f"{backend_key()}: {what}\nif the goldens' evidence is new and checked, "
                    f"run `{WRITE_COMMAND}`")
    assert not pinned, (f"pinned as ORACLE-BUG in tests/parity/gate_pins.json but {what}\n"
                        f"if the oracle's bug is gone, regen the golden and run "
                        f"`{WRITE_COMMAND}`")
    if result.status == Status.UNSUPPORTED and gate.skips_unsupported:
        pytest.skip(result.detail)
    assert result.status == Status.PASS, what
