"""The mutation campaign's sample, score and report, and the killers' fail-fast order."""

import json

import pytest

from batchlab.gate import killers
from batchlab.gate.mutation import campaign, load_verdicts, sample, status_of
from batchlab.gate.mutation_report import write_report


def _campaign(tmp_path, files: dict[str, dict[str, int | None]]):
    engine = tmp_path / "mutants" / "batchlab" / "engine"
    engine.mkdir(parents=True)
    for name, codes in files.items():
        (engine / f"{name}.meta").parent.mkdir(parents=True, exist_ok=True)
        (engine / f"{name}.meta").write_text(json.dumps({"exit_code_by_key": codes}))
    return tmp_path


def _names(module: str, n: int) -> list[str]:
    return [f"batchlab.engine.{module}.f__mutmut_{i}" for i in range(1, n + 1)]


def test_the_sample_takes_every_nth_mutant_of_each_file_in_name_order(tmp_path):
    kv, mask = _names("caches.kv", 12), _names("caches.mask", 4)
    root = _campaign(tmp_path, {"caches/kv.py": dict.fromkeys(kv),
                                "caches/mask.py": dict.fromkeys(mask)})
    # a function's mutants by number: _9 before _10
    assert sample(root, 5) == ["batchlab.engine.caches.kv.f__mutmut_1",
                               "batchlab.engine.caches.kv.f__mutmut_6",
                               "batchlab.engine.caches.kv.f__mutmut_11",
                               "batchlab.engine.caches.mask.f__mutmut_1"]
    assert sample(root, 1) == kv + mask
    with pytest.raises(ValueError, match="--every must be >= 1"):
        sample(root, 0)


def test_the_score_counts_killed_and_timeouts_over_the_judged_mutants(tmp_path):
    codes = {"batchlab.engine.caches.kv.a": 1, "batchlab.engine.caches.kv.b": 0, "batchlab.engine.caches.kv.c": 36,
             "batchlab.engine.caches.kv.d": 33, "batchlab.engine.caches.kv.e": None, "batchlab.engine.caches.kv.f": 3}
    root = _campaign(tmp_path, {"caches/kv.py": codes})
    result = campaign(root, sorted(codes))
    assert dict(result.counts) == {"killed": 2, "survived": 1, "timeout": 1, "no tests": 1,
                                   "not checked": 1}
    assert result.tested == 4 and result.score == 75.0
    assert [o.name for o in result.survivors] == ["batchlab.engine.caches.kv.b"]
    assert status_of(-11) == "segfault" and status_of(77) == "suspicious"
    with pytest.raises(ValueError, match="1 sampled mutants are not in"):
        campaign(root, ["batchlab.engine.caches.kv.zzz"])


def test_the_report_shows_each_survivor_with_its_diff_and_verdict(tmp_path):
    codes = {"batchlab.engine.caches.kv.a": 1, "batchlab.engine.caches.kv.b": 0, "batchlab.engine.caches.kv.c": 0}
    root = _campaign(tmp_path, {"caches/kv.py": codes})
    result = campaign(root, sorted(codes))
    verdicts_file = tmp_path / "verdicts.toml"
    verdicts_file.write_text('[verdicts]\n"batchlab.engine.caches.kv.b" = "equivalent: same bits"\n')
    verdicts = load_verdicts(verdicts_file)
    out = tmp_path / "report"
    unjudged = write_report(out, result, {"batchlab.engine.caches.kv.b": "-x = 1\n+x = 2"}, verdicts,
                            "a note")
    assert unjudged == ["batchlab.engine.caches.kv.c"]
    text = (out / "README.md").read_text()
    assert "**Mutation score 33.3%**: 3 mutants judged" in text
    assert "Verdict: equivalent: same bits\n\n```diff\n-x = 1\n+x = 2\n```" in text
    assert "Verdict: NOT JUDGED YET" in text
    assert "## Surviving mutants (2: 1 equivalent, 1 not judged)" in text
    assert ("Killed or closed: 1/3 = 33.3%; excluding the equivalent mutants: 1/2 = 50.0%."
            in text)
    saved = json.loads((out / "results.json").read_text())
    assert saved["score"] == 33.33 and saved["mutants"]["batchlab.engine.caches.kv.c"]["verdict"] is None


def test_killers_run_engine_unit_tests_then_the_richest_cells_then_the_rest():
    ids = [
        "tests/unit/test_bench.py::test_bench_end_to_end",
        "tests/parity/test_matrices.py::test_cell[default:l1/llama/B1/equal/static/ctx-short]",
        "tests/parity/test_matrices.py::test_cell[default:l1/qwen3/B3/ragged/join/ctx-short]",
        "tests/parity/test_matrices.py::test_cell[default:l1/llama/B3/ragged/join-evict/ctx-wrap]",
        "mutants/tests/unit/test_engine_caches.py::test_ring_matches_mlx_lm[5-1-8]",
        "tests/unit/test_sampler.py::test_x",
    ]
    ordered = sorted(ids, key=killers.rank)
    assert ordered == [ids[4], ids[5], ids[3], ids[2], ids[1], ids[0]]
