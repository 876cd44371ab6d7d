"""The campaign runner and mutants whose function runs at import (gate/mutation_run.py).

A forked child cannot switch such a mutant on: the server imported the module, running
the original, before the fork. The runner must notice them (the shim's recording around
its imports) and give them a fresh interpreter with MUTANT_UNDER_TEST set before import.
The fake mutants tree below has one: ``TABLE = make_table()`` at import; its mutant
changes the table. A unit test that reads the table kills it only in a fresh child.
"""

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from batchlab.gate import mutation_shim
from batchlab.gate.mutation_run import every_cell, import_time_functions, run

MODULE = textwrap.dedent('''\
    from mutmut.mutation.trampoline import wrap_in_trampoline as _mutmut_mutated, MutantDict

    mutants_x_make_table__mutmut: MutantDict = {}


    @_mutmut_mutated(mutants_x_make_table__mutmut)
    def make_table():
        return {"kv8": 8}


    def x_make_table__mutmut_orig():
        return {"kv8": 8}


    def x_make_table__mutmut_1():
        return {"kv8": 4}


    def x_make_table__mutmut_2():
        raise ValueError("refused at import")


    mutants_x_make_table__mutmut['_mutmut_orig'] = x_make_table__mutmut_orig
    mutants_x_make_table__mutmut['x_make_table__mutmut_1'] = x_make_table__mutmut_1
    mutants_x_make_table__mutmut['x_make_table__mutmut_2'] = x_make_table__mutmut_2

    mutants_x_bits__mutmut: MutantDict = {}


    @_mutmut_mutated(mutants_x_bits__mutmut)
    def bits(name):
        return TABLE[name]


    def x_bits__mutmut_orig(name):
        return TABLE[name]


    def x_bits__mutmut_1(name):
        return TABLE[name] + 1


    mutants_x_bits__mutmut['_mutmut_orig'] = x_bits__mutmut_orig
    mutants_x_bits__mutmut['x_bits__mutmut_1'] = x_bits__mutmut_1

    TABLE = make_table()
    ''')

TEST = textwrap.dedent('''\
    import fakemut_tree


    def test_the_table():
        assert fakemut_tree.TABLE == {"kv8": 8}
        assert fakemut_tree.bits("kv8") == 8
    ''')

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "fakemut_tree.py").write_text(MODULE)
    (tmp_path / "test_fakemut_tree.py").write_text(TEST)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{REPO}")  # the fresh interpreter's path
    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    monkeypatch.delitem(sys.modules, "fakemut_tree", raising=False)
    return tmp_path


def test_recording_names_the_functions_that_ran(tree):
    mutation_shim.install(force=True)
    with mutation_shim.recording() as called:
        import fakemut_tree
    assert called == {"fakemut_tree.x_make_table"}  # bits() did not run at import
    assert fakemut_tree.bits("kv8") == 8
    assert called == {"fakemut_tree.x_make_table"}  # nothing is recorded after the block
    assert mutation_shim.stem("fakemut_tree.x_bits__mutmut_1") == "fakemut_tree.x_bits"


def test_import_time_functions_imports_the_plan_modules(tree):
    plan = {"mutants": [{"name": "fakemut_tree.x_bits__mutmut_1", "lines": []}]}
    assert "fakemut_tree.x_make_table" in import_time_functions(plan)
    assert "fakemut_tree.x_bits" not in import_time_functions(plan)


def test_an_import_time_mutant_runs_in_a_fresh_interpreter(tree):
    plan = {"mutants": [{"name": "fakemut_tree.x_make_table__mutmut_1", "lines": []},
                        {"name": "fakemut_tree.x_bits__mutmut_1", "lines": []}]}
    line_map = {"cells": {}, "lines": {}}  # no cells: the unit test is the only killer
    out = tree / "results.jsonl"
    run(plan, line_map, matrix=str(REPO / "matrices" / "default.toml"),
        goldens=str(REPO / "goldens"), jobs=2, cap=10.0, unit_cap=120.0,
        unit_args=[str(tree / "test_fakemut_tree.py")], deadline=time.time() + 120, out=out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    got = {(r["name"].rpartition(".")[2], r["kind"]): (r["status"], r.get("fresh", False))
           for r in rows}
    assert got == {
        ("x_make_table__mutmut_1", "matrix"): ("no cells", True),
        ("x_make_table__mutmut_1", "unit"): ("killed", True),  # a fork would see 8 here
        ("x_bits__mutmut_1", "matrix"): ("no cells", False),
        ("x_bits__mutmut_1", "unit"): ("killed", False),  # per call: a fork switches it on
    }


def test_every_cell_puts_one_cell_of_each_path_and_status_first():
    clean = {"l1/llama/B3/ragged/join-evict/ctx-wrap": {"status": "PASS", "seconds": 2.0},
             "l1/llama/B2/equal/static/ctx-short": {"status": "PASS", "seconds": 0.1},
             "kv4h/llama-hd96/B2/ragged/join/ctx-short": {"status": "UNSUPPORTED",
                                                         "seconds": 0.5},
             "kv4h/llama/B2/ragged/join/ctx-short": {"status": "PASS", "seconds": 0.4},
             "kv4h/llama/B3/ragged/join/ctx-short": {"status": "PASS", "seconds": 0.3}}
    assert every_cell(clean) == [
        "l1/llama/B3/ragged/join-evict/ctx-wrap",  # killers.py's first rank
        "kv4h/llama/B3/ragged/join/ctx-short",  # kv4h's cheapest PASS of the "/ragged/" rank
        "kv4h/llama-hd96/B2/ragged/join/ctx-short",  # kv4h's refusal
        "kv4h/llama/B2/ragged/join/ctx-short",
        "l1/llama/B2/equal/static/ctx-short",
    ]


def test_a_mutant_that_breaks_the_import_is_killed(tree):
    """A check that refuses the module's own import-time default (round 5's
    SamplingParams mutants against ``GREEDY = SamplingParams()``): no cell can run."""
    plan = {"mutants": [{"name": "fakemut_tree.x_make_table__mutmut_2", "lines": []}]}
    line_map = {"cells": {"l1/llama/B2/equal/static/ctx-short": {"status": "PASS",
                                                                 "seconds": 1.0}},
                "lines": {}}
    out = tree / "results.jsonl"
    run(plan, line_map, matrix=str(REPO / "matrices" / "default.toml"),
        goldens=str(REPO / "goldens"), jobs=1, cap=10.0, unit_cap=60.0, unit_args=[],
        deadline=time.time() + 60, out=out)
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert (row["status"], row["by"], row["got"], row["fresh"]) == (
        "killed", "(import)", "CRASH", True)
    assert "ValueError: refused at import" in row["detail"]
