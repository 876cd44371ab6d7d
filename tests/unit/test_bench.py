"""``batchlab bench`` end to end on a tiny zoo model (seconds), and its pure parts.

No timing assertions, ever: times on a shared CI machine say nothing. These check that
the bench runs every engine, writes its files, and that the report derives from the CSV.
"""

from __future__ import annotations

import csv
import gc
from pathlib import Path

import pytest
from mlx import nn
from mlx.utils import tree_flatten

from batchlab.bench.engines import BATCH_GENERATOR, Run
from batchlab.bench.measure import (
    BenchSpec,
    gc_paused,
    holm,
    make_prompts,
    repeats_for_family,
    slower_p,
    summarize,
)
from batchlab.bench.report import file_stem, read_csv
from batchlab.bench.roofline import measure_bandwidth, weight_bytes
from batchlab.bench.shapes import SHAPES, parse_shape_name
from batchlab.cli import main
from batchlab.zoo import load
from batchlab.zoo.weights import model_classes


def test_bench_end_to_end(tmp_path):
    argv = ["bench", "--model", "llama", "--batch", "1,2", "--prompt-len", "4",
            "--gen-len", "3", "--repeats", "2", "--bandwidth", "10", "--out", str(tmp_path)]
    assert main(argv) == 0
    for ext in ("csv", "md", "png"):
        assert (tmp_path / f"llama.{ext}").is_file()
    with open(tmp_path / "llama.csv") as f:
        rows = list(csv.DictReader(f))
    assert "ratio_vs_mlx_lm" in rows[0]
    assert [(r["batch"], r["engine"]) for r in rows] == [
        ("1", "l1"), ("1", "BatchGenerator"), ("1", "generate_step"),
        ("2", "l1"), ("2", "BatchGenerator"),
    ]
    assert {r["repeats"] for r in rows} == {"2"}
    assert rows[1]["ratio_vs_mlx_lm"] == "1.0"  # BatchGenerator against itself
    assert rows[3]["ratio_vs_generate_step"] == ""  # generate_step runs at B=1 only
    table = (tmp_path / "llama.md").read_text()
    assert "| B | l1 ms/step | BatchGenerator ms/step |" in table
    assert "l1 / mlx-lm" in table

    # the report is rebuilt from the CSV alone
    (tmp_path / "llama.md").unlink()
    (tmp_path / "summary.md").unlink()
    assert main(["bench", "report", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "llama.md").read_text() == table
    assert "[llama](llama.png)" in (tmp_path / "summary.md").read_text()
    assert read_csv(tmp_path / "llama.csv")[0].engine == "l1"


def test_bench_refuses_unknown_path_and_model(tmp_path):
    with pytest.raises(ValueError, match="unknown path"):
        BenchSpec(batches=(1,), prompt_len=4, gen_len=3, paths=("l9",))
    assert main(["bench", "--model", "no-such-model", "--bandwidth", "1",
                 "--out", str(tmp_path)]) == 2


def test_prompts_are_deterministic_per_seed_and_b():
    assert make_prompts(2, 3, 320, seed=0) == make_prompts(2, 3, 320, seed=0)
    assert make_prompts(2, 3, 320, seed=0) != make_prompts(2, 3, 320, seed=1)
    assert len(make_prompts(4, 5, 320, seed=0)) == 4


def test_file_stem():
    assert file_stem("qwen3-0.6b@L2") == "qwen3-0.6b-L2"
    assert file_stem("llama") == "llama"


def test_shape_names():
    assert parse_shape_name("llama") is None
    shape, layers = parse_shape_name("qwen3-0.6b@L2")
    assert (shape.name, layers) == ("qwen3-0.6b", 2)
    with pytest.raises(ValueError, match="@L"):
        parse_shape_name("qwen3-0.6b@Lx")


# Parameter counts of the real checkpoints (text model): the shapes must match them.
# Counted on the lazily built modules: nothing is evaluated, so this takes no memory.
REAL_PARAMS = {
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.1-8b": 8_030_261_248,
    "qwen3-0.6b": 596_049_920,
    "gemma3-4b": 3_880_263_168,
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shapes_have_the_real_parameter_counts(name):
    shape = SHAPES[name]
    model_cls, args_cls = model_classes(shape.model_type)
    model = model_cls(args_cls.from_dict({"model_type": shape.model_type, **shape.config}))
    if shape.tied and "lm_head" in model:
        model.pop("lm_head")
    assert sum(p.size for _, p in tree_flatten(model.parameters())) == REAL_PARAMS[name]


def test_weight_bytes_skip_gathered_tables():
    tied = load("llama").model  # tied head: the embedding is read whole every step
    assert weight_bytes(tied).streamed == weight_bytes(tied).total

    class Untied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(10, 4)
            self.lm_head = nn.Linear(4, 10, bias=False)

    untied = weight_bytes(Untied())
    assert (untied.total, untied.streamed) == (2 * 40 * 4, 40 * 4)


def test_measure_bandwidth_is_positive():
    assert measure_bandwidth(num_bytes=1 << 20, repeats=2) > 0


def test_a_failing_model_does_not_stop_the_others(tmp_path, monkeypatch):
    from batchlab.commands import bench as bench_cli

    done = []

    def fake(name, spec, bandwidth, out, console):
        if name == "qwen3":
            raise RuntimeError("out of memory")
        done.append(name)

    monkeypatch.setattr(bench_cli, "_bench_model", fake)
    argv = ["bench", "--model", "qwen3,llama", "--bandwidth", "1", "--out", str(tmp_path)]
    assert main(argv) == 1
    assert done == ["llama"]


def _run(engine: str, repeat: int, step_ms: float) -> Run:
    return Run(engine=engine, batch=2, prompt_len=4, prefill_s=1.0, decode_s=step_ms / 1e3,
               decode_steps=1, peak_bytes=0, repeat=repeat)


def test_ratio_spread_pairs_each_repeat_with_batch_generator_of_that_repeat():
    # repeat 1 is slow for both engines (a drift both see): paired ratios stay at 2.0
    runs = [_run("l1", 0, 1.0), _run(BATCH_GENERATOR, 0, 2.0),
            _run("l1", 1, 4.0), _run(BATCH_GENERATOR, 1, 8.0),
            _run("l1", 2, 1.0), _run(BATCH_GENERATOR, 2, 3.0)]
    spec = BenchSpec(batches=(2,), prompt_len=4, gen_len=3, repeats=3)
    ours, theirs = summarize(runs, model="m", backend="cpu", spec=spec, bound_s=None,
                             bandwidth=None, streamed_bytes=0,
                             versions={"mlx": "x", "mlx_lm": "y"})
    assert ours.engine == "l1" and ours.ratio_vs_mlx_lm == 3.0  # median 3 ms / median 1 ms
    assert (ours.ratio_min, ours.ratio_max) == (2.0, 3.0)
    assert theirs.ratio_min is None and theirs.ratio_max is None


def test_time_over_l1_pairs_each_repeat_with_l1_of_that_repeat():
    """A path's step over l1's is taken inside each repeat (the H200's host speed drifts
    between repeats): repeat 1 slows both engines 4x, the paired ratio stays 1.25-1.5,
    where the ratio of medians would read 2.5 / 1.0; the table prints the paired median."""
    from batchlab.bench.report import markdown

    runs = [_run("l1", 0, 1.0), _run("invariant", 0, 1.5), _run(BATCH_GENERATOR, 0, 2.0),
            _run("l1", 1, 4.0), _run("invariant", 1, 5.0), _run(BATCH_GENERATOR, 1, 8.0),
            _run("l1", 2, 1.0), _run("invariant", 2, 1.25), _run(BATCH_GENERATOR, 2, 2.0)]
    spec = BenchSpec(batches=(2,), prompt_len=4, gen_len=3, repeats=3)
    results = summarize(runs, model="m", backend="cpu", spec=spec, bound_s=None,
                        bandwidth=None, streamed_bytes=0, versions={"mlx": "x", "mlx_lm": "y"})
    by = {r.engine: r for r in results}
    assert (by["invariant"].l1_ratio, by["invariant"].l1_ratio_min,
            by["invariant"].l1_ratio_max) == (1.25, 1.25, 1.5)
    assert by["l1"].l1_ratio is None and by[BATCH_GENERATOR].l1_ratio == 2.0
    row = next(line for line in markdown(results).splitlines() if line.startswith("| 2 |"))
    assert row.endswith("| 1.25x [1.25-1.50] | 1.00 |")


def test_runs_are_timed_with_the_garbage_collector_paused():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("a crashed run")
    assert gc.isenabled()  # a failing run leaves the collector on


def test_slower_is_called_only_when_the_engine_loses_consistently():
    assert slower_p([0.90, 0.95, 0.97, 0.85, 0.92]) < 0.05  # lost every repeat
    assert slower_p([1.10, 0.95, 1.07, 0.85, 1.02]) > 0.5  # a tie with noise
    assert slower_p([0.5, 1.5, 0.9, 1.1, 1.0]) > 0.05  # one bad repeat is no verdict
    assert slower_p([0.9, 0.9, 0.9, 0.9]) is None  # 4 pairs cannot reach p < 0.05
    assert slower_p([1.0] * 5) == 1.0


def test_holm_adjusts_a_family_of_p_values():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]
    assert holm([0.2, 0.9]) == [0.4, 0.9]  # capped at 1, never below an earlier rank


def test_a_family_needs_enough_repeats_to_flag_a_cell():
    assert repeats_for_family(1) == 5  # 1/32 < 0.05
    assert repeats_for_family(9) == 8  # 9/256 < 0.05 <= 9/128
    assert repeats_for_family(18) == 9


def _sweep_with_one_loser(repeats: int, loser_ratio: float) -> list:
    """9 B cells: B=1 loses every repeat at ``loser_ratio``, the rest tie with noise."""
    runs = []
    for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        for r in range(repeats):
            ours = 1.0 / loser_ratio if batch == 1 else 1.0 + (0.1 if r % 2 else -0.1)
            runs += [Run(engine="l1", batch=batch, prompt_len=4, prefill_s=1.0,
                         decode_s=ours / 1e3, decode_steps=1, peak_bytes=0, repeat=r),
                     Run(engine=BATCH_GENERATOR, batch=batch, prompt_len=4, prefill_s=1.0,
                         decode_s=1.0 / 1e3, decode_steps=1, peak_bytes=0, repeat=r)]
    spec = BenchSpec(batches=(1, 2, 4, 8, 16, 32, 64, 128, 256), prompt_len=4, gen_len=3,
                     repeats=repeats)
    return summarize(runs, model="m", backend="cpu", spec=spec, bound_s=None, bandwidth=None,
                     streamed_bytes=0, versions={"mlx": "x", "mlx_lm": "y"})


def test_slower_cells_are_counted_over_the_family():
    from batchlab.bench.report import _slower_cells, markdown

    def l1(results):
        return [r for r in results if r.engine == "l1"]

    # 8 repeats all lost at B=1: raw p = 1/256, times 9 cells = 0.035 -> slower
    flagged = _sweep_with_one_loser(8, 0.9)
    assert _slower_cells(l1(flagged)) == "1 (of 9)"
    assert "**slower**" in markdown(flagged)
    # 5 repeats cannot reach 0.05 over 9 cells: said so, never "none"
    assert _slower_cells(l1(_sweep_with_one_loser(5, 0.9))) == (
        "not testable over 9 B with 5 repeats (needs 8)")


def test_profile_end_to_end_splits_every_engine_and_restores_the_hooks(tmp_path):
    import mlx.core as mx

    from batchlab.engine.paths.fast import flat_decode

    model_cls = type(load("llama").model)
    forward, async_eval, eval_ = model_cls.__call__, mx.async_eval, mx.eval
    flat = flat_decode.flat_logits
    argv = ["bench", "profile", "--model", "llama", "--batch", "1,2", "--prompt-len", "4",
            "--gen-len", "4", "--repeats", "1", "--paths", "l1,fast", "--out", str(tmp_path)]
    assert main(argv) == 0
    table = (tmp_path / "profile" / "llama.md").read_text()
    rows = [line.split(" | ") for line in table.splitlines()
            if line.startswith(("| 1 ", "| 2 "))]
    assert [(r[0], r[1]) for r in rows] == [
        ("| 1", "l1"), ("| 1", "fast"), ("| 1", "BatchGenerator"), ("| 1", "generate_step"),
        ("| 2", "l1"), ("| 2", "fast"), ("| 2", "BatchGenerator"),
    ]
    for r in rows:  # every engine's forward was built and submitted inside the window
        assert not r[3].startswith("0 ") and not r[4].startswith("0 "), r
    assert (model_cls.__call__, mx.async_eval, mx.eval) == (forward, async_eval, eval_)
    assert flat_decode.flat_logits is flat


def test_profile_hooks_are_restored_when_the_window_raises():
    import mlx.core as mx

    from batchlab.bench.profile import _Clock, timing_hooks

    model = load("llama").model
    forward, async_eval = type(model).__call__, mx.async_eval
    clock = _Clock()
    with pytest.raises(RuntimeError), timing_hooks(model, clock, sync_after_submit=True):
        mx.async_eval(mx.ones(3) + 1)
        raise RuntimeError("a crashed run")
    assert (type(model).__call__, mx.async_eval) == (forward, async_eval)
    assert clock.submit > 0 and clock.wait >= 0 and clock.build == 0


@pytest.mark.parametrize("module,forward", [("chain_decode", "RowChain"),
                                            ("persistent_decode", "RowStep")])
def test_profile_counts_fasts_one_row_forwards_as_forward_build(monkeypatch, module, forward):
    import importlib
    import time

    from batchlab.bench.profile import _Clock, timing_hooks

    cls = getattr(importlib.import_module(f"batchlab.engine.paths.fast.{module}"), forward)

    def slow_logits(self, tokens, caches):
        time.sleep(0.002)
        return "logits"

    monkeypatch.setattr(cls, "logits", slow_logits)
    clock = _Clock()
    with timing_hooks(load("llama").model, clock, sync_after_submit=False):
        assert cls.logits(None, None, None) == "logits"
    assert clock.build >= 0.002
    assert cls.logits is slow_logits


def test_a_path_beside_l1_shows_its_time_and_prefill_over_l1s():
    """Where l1 ran beside another path, the table gives that path's step time over l1's
    and its prefill tok/s over l1's at each B, from the medians (issue 28's H200 run:
    invariant 5.15 against l1 4.79 ms at B=1, unrounded 1.074x; prefill 5577 / 6871)."""
    from batchlab.bench.report import markdown

    results = read_csv(Path("reports/bench/cuda-sm90/issue28-row-gemm/s16b-bench/bench-1b/"
                            "llama-3.2-1b.csv"))
    table = markdown(results)
    head = next(line for line in table.splitlines() if line.startswith("| B |"))
    assert head.endswith("| invariant time / l1 | invariant prefill / l1 |")
    rows = {line.split(" | ")[0]: line for line in table.splitlines()
            if line[:3] in ("| 1", "| 2")}  # the B=1 and B=256 rows
    assert rows["| 1"].endswith("| 1.07x | 0.81 |")
    assert rows["| 256"].endswith("| 1.02x | 0.51 |")
    only_l1 = markdown([r for r in results if r.engine != "invariant"])
    assert "/ l1" not in only_l1
