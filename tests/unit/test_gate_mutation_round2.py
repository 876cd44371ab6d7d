"""The round-2 mutation campaign's pure parts: sample size, interval, verdict kinds,
changed lines of a mutant, and the figures (docs/mutation.md)."""

import textwrap

from batchlab.gate.mutation_plan import mutant_lines, sample_size, wilson
from batchlab.gate.mutation_results import Mutant, figures, kind


def test_sample_size_for_a_five_percent_interval():
    assert sample_size(0.05, 3991) == 351  # 384.16 before the finite-population correction
    assert sample_size(0.05, 10**9) == 385


def test_wilson_interval():
    low, high = wilson(230, 335)
    assert (round(100 * low, 1), round(100 * high, 1)) == (63.5, 73.4)
    assert wilson(0, 0) == (0.0, 1.0)


def test_verdict_kind_is_the_first_word():
    assert kind("hole (capped: 8 of 90): why") == "hole"
    assert kind("equivalent: why") == "equivalent"
    assert kind("maybe: why") == "not judged" and kind(None) == "not judged"


def test_changed_lines_map_to_the_engine_statement(tmp_path, monkeypatch):
    src = textwrap.dedent('''\
        def f(a, b=1):
            x = (a +
                 b)
            return x
        ''')
    mutated = textwrap.dedent('''\
        def x_f__mutmut_orig(a, b=1):
            x = (a +
                 b)
            return x
        def x_f__mutmut_1(a, b=1):
            x = (a -
                 b)
            return x
        def x_f__mutmut_2(a, b=2):
            x = (a +
                 b)
            return x
        ''')
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(src)
    (tmp_path / "mutants").mkdir()
    (tmp_path / "mutants" / "m.py").write_text(mutated)
    lines = mutant_lines(tmp_path / "mutants", "m.py")
    assert lines["x_f__mutmut_1"] == [2]  # the statement's first line, as coverage counts it
    assert lines["x_f__mutmut_2"] == [2, 4]  # a default argument: every statement of the body


def test_figures_leave_equivalent_survivors_out_of_the_score():
    def mutant(name, matrix, unit):
        return Mutant(name=name, file="f.py", matrix=matrix, unit=unit, detail={})

    ms = [mutant("a", "killed", "killed by matrix"), mutant("b", "survived", "killed"),
          mutant("c", "no cells", "no unit tests"), mutant("d", "capped", "survived")]
    f = figures(ms, {"c": "equivalent: never reached", "b": "hole: x", "d": "hole: y"})
    assert (f["killed"], f["non_equivalent"], f["matrix_score"]) == (1, 3, 33.3)
    assert f["matrix_unit_score"] == 66.7 and f["raw_matrix_score"] == 25.0
