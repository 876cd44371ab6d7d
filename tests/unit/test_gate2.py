"""The gate's second round (issue 26): which quantized cells are gated bit-exact, the
serial self-check on sliding-window models while no ring has wrapped, and the serial
quantized oracle's replay of rows with history against mlx-lm's own generate_step."""

import mlx.core as mx
from mlx_lm.generate import generate_step, maybe_quantize_kv_cache
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import greedy_sampler

from batchlab.cells.cell import Event, Row
from batchlab.cells.spec import expand
from batchlab.judging.judging import quantized_exact, quantized_exact_rows
from batchlab.oracle.quantized_serial import replay_quantized_row
from batchlab.oracle.serial import ring_width_bound, serial_check_reason
from batchlab.trajectory import Step, Trajectory
from batchlab.zoo import load


def _cells(sweep: dict) -> dict:
    return {c.id: c for c in expand({"sweep": [sweep]})}


def _exact(cell) -> bool:
    return quantized_exact(cell, has_rings=False, on_gpu=False)


def test_start_above_zero_is_exact_only_where_rows_switch_on_one_write():
    cells = _cells({"models": ["llama-hd64"], "paths": ["kv8-s8", "kv8"], "batch": [1, 4],
                    "padding": ["equal", "ragged"], "scripts": ["static", "join-evict"],
                    "contexts": ["short"]})
    exact = sorted(i for i, c in cells.items() if _exact(c))
    assert exact == [
        "kv8-s8/llama-hd64/B1/equal/static/ctx-short",
        "kv8-s8/llama-hd64/B1/ragged/static/ctx-short",
        "kv8-s8/llama-hd64/B4/equal/static/ctx-short",
        "kv8/llama-hd64/B1/equal/static/ctx-short",
        "kv8/llama-hd64/B1/ragged/static/ctx-short",
        "kv8/llama-hd64/B4/equal/join-evict/ctx-short",
        "kv8/llama-hd64/B4/equal/static/ctx-short",
        "kv8/llama-hd64/B4/ragged/join-evict/ctx-short",
        "kv8/llama-hd64/B4/ragged/static/ctx-short",
    ]
    start0 = cells["kv8/llama-hd64/B4/ragged/static/ctx-short"]
    assert not quantized_exact(start0, has_rings=True, on_gpu=False)
    assert not quantized_exact(start0, has_rings=False, on_gpu=True)


def test_start_above_zero_is_kl_when_the_prefill_batch_splits_the_rows():
    cells = _cells({"models": ["llama-hd64"], "paths": ["kv8-s8"], "batch": [4],
                    "padding": ["equal"], "scripts": ["static"], "contexts": ["short"],
                    "schedule": [{"prefill_batch_size": 2}, {"prefill_step_size": 2}]})
    assert {i: _exact(c) for i, c in cells.items()} == {
        "kv8-s8/llama-hd64/B4/equal/static/ctx-short/pb2": False,
        "kv8-s8/llama-hd64/B4/equal/static/ctx-short/ps2": True,
    }


def test_the_longest_rows_of_a_ragged_start_above_zero_batch_stay_exact():
    cells = _cells({"models": ["llama-hd64"], "paths": ["kv8-s8", "kv8", "l1"], "batch": [4],
                    "padding": ["ragged"], "scripts": ["static", "join-evict"],
                    "contexts": ["short"], "schedule": [{}, {"prefill_batch_size": 2}]})
    ragged = cells["kv8-s8/llama-hd64/B4/ragged/static/ctx-short"]
    lengths = sorted((len(r.prompt), r.name) for r in ragged.rows)
    rows = {i: quantized_exact_rows(c, has_rings=False, on_gpu=False) for i, c in cells.items()}
    assert rows == {
        "kv8-s8/llama-hd64/B4/ragged/static/ctx-short": ("A",),  # the longest of 4 rows
        "kv8-s8/llama-hd64/B4/ragged/static/ctx-short/pb2": (),  # two prefill batches
        "kv8-s8/llama-hd64/B4/ragged/join-evict/ctx-short": (),  # joins later
        "kv8-s8/llama-hd64/B4/ragged/join-evict/ctx-short/pb2": (),
        "kv8/llama-hd64/B4/ragged/static/ctx-short": ("A", "B", "C", "D"),  # start 0
        "kv8/llama-hd64/B4/ragged/static/ctx-short/pb2": ("A", "B", "C", "D"),
        "kv8/llama-hd64/B4/ragged/join-evict/ctx-short": ("A", "B", "C", "D"),
        "kv8/llama-hd64/B4/ragged/join-evict/ctx-short/pb2": ("A", "B", "C", "D"),
        "l1/llama-hd64/B4/ragged/static/ctx-short": (),  # no quantized KV
        "l1/llama-hd64/B4/ragged/static/ctx-short/pb2": (),
        "l1/llama-hd64/B4/ragged/join-evict/ctx-short": (),
        "l1/llama-hd64/B4/ragged/join-evict/ctx-short/pb2": (),
    }
    assert lengths[-1][1] == "A" and lengths[-2][0] < lengths[-1][0]  # one longest row
    assert quantized_exact_rows(ragged, has_rings=True, on_gpu=False) == ()
    assert quantized_exact_rows(ragged, has_rings=False, on_gpu=True) == ()


def _trajectory(steps: dict[str, list[int]]) -> Trajectory:
    return Trajectory(rows={name: tuple(Step(step=s, token=0, digest="", top=())
                                        for s in at) for name, at in steps.items()},
                      dtype="bfloat16")


def test_ring_width_bound_counts_ids_and_emitting_steps():
    cell = expand({"cell": [{"model": "gemma3", "script": "x", "steps": 3,
                             "prompts": {"A": {"length": 5}, "B": {"length": 2}},
                             "events": ["insert A,B at 0"]}]})[0]
    assert ring_width_bound(cell, _trajectory({"A": [0, 1, 2], "B": [0, 1, 2]})) == 8
    assert ring_width_bound(cell, _trajectory({"A": [1, 2, 3], "B": [0, 1, 2]})) == 9
    assert ring_width_bound(cell, _trajectory({})) == 0


def test_serial_check_on_sliding_windows_while_no_ring_wrapped():
    gemma3 = load("gemma3").model  # window 8
    assert serial_check_reason(gemma3, "cpu-x86_64", widest=8) is None
    assert serial_check_reason(gemma3, "cpu-x86_64", widest=9).startswith(
        "skipped: sliding-window")
    assert serial_check_reason(gemma3, "cpu-x86_64").startswith("skipped: sliding-window")
    assert serial_check_reason(load("llama").model, "cpu-x86_64") is None


def _mlx_lm_row(model, prompt, n, prefix=()):
    """mlx-lm's own single-stream run at kv8: a prefix cache built in the model dtype and
    quantized as it is handed over (maybe_quantize_kv_cache), then generate_step."""
    cache = make_prompt_cache(model)
    if prefix:
        model(mx.array([list(prefix)]), cache=cache)
        maybe_quantize_kv_cache(cache, 0, 64, 8)
    return list(generate_step(mx.array(prompt), model, max_tokens=n, sampler=greedy_sampler,
                              prompt_cache=cache, kv_bits=8, kv_group_size=64,
                              quantized_kv_start=0))


def test_quantized_replay_of_a_prefix_row_is_mlx_lms_own_run():
    model = load("llama-hd64").model
    from batchlab.engine.paths.registry import resolve_path

    plan = resolve_path("kv8", model).kv_scheme.plan(model)
    prompt, prefix = (5, 9, 200, 31, 7, 64), (40, 41, 42, 43, 44, 45, 46, 47, 48)
    for pre in ((), prefix):
        row = Row(name="A", prompt=prompt, max_tokens=5, prefix=pre)
        cell = expand({"cell": [{"model": "llama-hd64", "path": "kv8", "script": "x",
                                 "steps": 5, "prompts": {"A": list(prompt)},
                                 "events": ["insert A at 0"]}]})[0]
        got = replay_quantized_row(model, cell, row, [5], plan)
        want = _mlx_lm_row(model, prompt, 5, pre)
        assert [t for t, _ in got] == [t for t, _ in want]
        assert all(mx.array_equal(a, b).item() for (_, a), (_, b) in zip(got, want))


def test_event_records_used_above_are_the_cells():
    # the sweep vocabulary used above expands to the events the rule reads
    cell = _cells({"models": ["llama-hd64"], "paths": ["kv8-s8"], "batch": [4],
                   "padding": ["equal"], "scripts": ["evict"], "contexts": ["short"]})
    (only,) = cell.values()
    assert only.events == (Event(step=0, action="insert", rows=("A", "B", "C", "D")),
                           Event(step=8, action="remove", rows=("A",)))
    assert _exact(only)


def _window_fits(model: str):
    return expand({"cell": [{"model": model, "script": "window-fits", "steps": 3,
                             "prompts": {"A": {"length": 5}, "B": {"length": 2},
                                         "C": {"length": 3}},
                             "events": ["insert A,B,C at 0"]}]})[0]


def test_the_gate_marks_baichuan_m1s_batch_mode_bug_itself():
    from batchlab.oracle.regen import make_golden

    golden = make_golden(_window_fits("baichuan-m1"))
    assert golden.serial_check == "oracle-bug"
    assert golden.oracle_bug["kind"] == "serial-mismatch"
    assert golden.oracle_bug["rows"] == ["B", "C"] and golden.oracle_bug["first_step"] == 0
    assert make_golden(_window_fits("gemma3")).serial_check == "agrees"
