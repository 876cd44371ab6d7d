"""The quantized paths' oracle, their KL report and density figures, exact values."""

from __future__ import annotations

import mlx.core as mx
import pytest
from loaded_matrices import matrix_cells

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.core.cost import RowCost
from batchlab.engine.paths.quantized.kv import BatchQuantizedKV, KVQuant
from batchlab.engine.paths.registry import PATHS, Unsupported, resolve_path
from batchlab.lab.report import markdown, summarize
from batchlab.lab.run import Scores, _host_logprobs, text_rows
from batchlab.oracle.quantized_serial import mlx_lm_steps, serial_quantized_steps
from batchlab.zoo import load


def test_the_oracle_loop_equals_mlx_lm_generate_step():
    """serial_quantized_steps (per-layer quantization) is generate_step's loop: with one
    KVQuant for every layer it gives mlx-lm's own bits, prefill chunks included."""
    model = load("llama-hd64").model
    prompt = tuple(range(40, 53))
    for q in (KVQuant(bits=4, group_size=32), KVQuant(bits=8, start=6)):
        theirs = mlx_lm_steps(model, prompt, 4, q, 5)
        ours = serial_quantized_steps(model, prompt, 4, [q, q], 5)
        assert [t for t, _ in ours] == [t for t, _ in theirs]
        assert all(mx.array_equal(a, b).item() for (_, a), (_, b) in zip(ours, theirs))


def test_a_row_parked_while_queued_is_replayed_afresh_on_its_resume_ids():
    """Round 6: B (completion batch 1, A decoding) is parked before it was admitted, so
    BatchGenerator hands back empty caches (0 ids held); the quantized oracle's B is then
    exactly mlx-lm's generate_step over B's resume ids alone, bits included."""
    from batchlab.cells.select import select
    from batchlab.oracle.batch import run_batch_oracle
    from batchlab.oracle.quantized_serial import run_quantized_oracle
    from batchlab.trajectory import digest

    [cell] = select(matrix_cells("matrices/default.toml"),
                    "kv8/llama-hd64/B2/explicit/park-queued/ctx-explicit/steps3_pb1_cb1", None)
    loaded = load("llama-hd64")
    held: dict[str, int] = {}
    run_batch_oracle(cell, loaded.model, loaded.dtype, held=held)
    assert held == {"B": 0}
    plan = PATHS["kv8"].kv_scheme.plan(loaded.model)
    got = run_quantized_oracle(cell, loaded.model, loaded.dtype, plan, keep_values=True)
    [b] = [r for r in cell.rows if r.name == "B"]
    alone = mlx_lm_steps(loaded.model, b.resume, 3, plan[0], cell.schedule.prefill_step_size)
    assert [s.token for s in got.rows["B"]] == [t for t, _ in alone]
    assert [s.digest for s in got.rows["B"]] == [digest(lp) for _, lp in alone]
    assert [s.step for s in got.rows["B"]] == [6, 7, 8]


def test_kv_paths_refuse_head_dims_that_do_not_split_into_groups():
    with pytest.raises(Unsupported, match="head dim 16 is not a multiple of the kv group size 64"):
        resolve_path("kv8", load("llama").model)
    with pytest.raises(Unsupported, match="sinks"):
        resolve_path("kv4", load("gpt-oss").model)
    assert resolve_path("kv4-g32", load("llama-hd64").model).kv_scheme.group_size == 32


def test_kvmix_gives_8_bits_to_the_most_sensitive_quarter():
    from batchlab.engine.paths.quantized.sensitivity import layer_sensitivity

    model = load("gemma3-hd64").model
    scheme = PATHS["kvmix"].kv_scheme
    scores = layer_sensitivity(model, scheme)
    plan = scheme.plan(model)
    assert len(scores) == len(plan) == 4 and all(s > 0 for s in scores)
    top = max(range(4), key=lambda i: scores[i])
    assert [q.bits for q in plan] == [8 if i == top else 4 for i in range(4)]


def test_summary_statistics_in_llama_cpp_layout():
    s = Scores(kl=[0.0, 0.1, 0.2, 0.3], same_top1=[True, True, False, True],
               p_ref=[0.5, 0.5, 0.5, 0.5], p_path=[0.5, 0.4, 0.6, 0.5],
               logp_ref=[-1.0, -1.0, -1.0, -1.0], logp_path=[-1.0, -1.5, -0.5, -1.2])
    r = summarize("kv4", "l1", s)
    assert (r.positions, r.kl_median, r.kl_max, r.same_top1) == (4, 0.15000000000000002, 0.3, 0.75)
    assert round(r.kl_mean, 12) == 0.15 and round(r.kl_stderr, 6) == 0.064550
    assert round(r.dp_mean, 12) == 0.0 and round(r.dp_rms, 6) == 0.070711
    assert round(r.ln_ppl_ratio, 12) == 0.05
    assert "| kv4 | 4 | 0.15000 ± 0.06455 |" in markdown([r], "header")


def test_text_rows_are_ragged_consecutive_slices():
    rows = text_rows(tuple(range(100)), rows=5, length=16, context=4)
    assert [len(r.ids) for r in rows] == [16, 14, 16, 14, 16]
    assert rows[1].ids[0] == 16 and rows[2].ids[0] == 30 and rows[0].context == 4


def test_the_host_gets_each_rows_logprobs_from_one_copy_a_step(monkeypatch):
    """Each emission's row of its step's (B, V) array, in float32, bit for bit what a
    copy of that row alone gives; one host copy per distinct step array."""
    import numpy as np

    from batchlab.engine.core.scheduler import Emission
    from batchlab.lab import run

    step = mx.random.normal((3, 7)).astype(mx.bfloat16)
    prefill = mx.random.normal((1, 7)).astype(mx.bfloat16)
    emitted = [Emission(name=n, token=0, finished=False, step_logprobs=a, row=r)
               for n, a, r in (("a", step, 2), ("b", prefill, 0), ("c", step, 0))]
    copies = []
    real = np.array
    monkeypatch.setattr(run.np, "array", lambda x, *a, **k: copies.append(1) or real(x))
    got = _host_logprobs(emitted)
    monkeypatch.undo()
    assert len(copies) == 2
    for e, row in zip(emitted, got, strict=True):
        alone = np.array(e.logprobs.astype(mx.float32))
        assert row.dtype == np.float32 and row.tobytes() == alone.tobytes()


def test_row_bytes_per_layer_kind():
    """3 heads of 64 dims in bf16: 768 B a token; a ring of window 8 holds 8 tokens."""
    cost = RowCost(per_token=768, window_per_token=((8, 768),), fixed=0)
    assert cost.row_bytes(100) == 100 * 768 + 8 * 768
    kv = BatchKV([0])
    kv.update_and_fetch(*[mx.zeros((1, 3, 100, 64), mx.bfloat16)] * 2)
    assert kv.token_bytes() == 768
    q4 = BatchQuantizedKV([0], KVQuant(bits=4, group_size=64))
    q4.update_and_fetch(*[mx.zeros((1, 3, 100, 64), mx.bfloat16)] * 2)
    q4.update_and_fetch(*[mx.zeros((1, 3, 1, 64), mx.bfloat16)] * 2)  # quantized from here
    assert q4.token_bytes() == 3 * 4 * (9 + 9)  # 216 B vs 768 B a token


def test_kv_flags_name_a_registered_path():
    """serve's --kv-bits / --kv-group-size / --quantized-kv-start pick (or register) a path."""
    from batchlab.engine.paths.registry import kv_path_for

    assert kv_path_for(8) == "kv8" and kv_path_for(4, 32) == "kv4-g32"
    name = kv_path_for(4, 64, 5000)
    assert name == "kv4-s5000" and PATHS[name].kv_scheme.start == 5000
    assert kv_path_for(4, 64, 5000) == name
    with pytest.raises(ValueError, match="choose from"):
        kv_path_for(4, 16)
