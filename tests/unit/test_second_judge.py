"""The invariant paths' second judge on hand-made trajectories: exact verdicts, and a
golden that keeps no logprobs is STALE for a judge that needs them, never a FAIL."""

from __future__ import annotations

import numpy as np

from batchlab.cells.spec import expand
from batchlab.judging.judging import judging_for
from batchlab.matrix.second import second_judge
from batchlab.trajectory import Step, Trajectory

CELL = expand({"defaults": {"path": "invariant", "steps": 2},
               "sweep": [{"models": ["llama"], "batch": [1], "padding": ["ragged"],
                          "scripts": ["static"], "contexts": ["short"]}]})[0]
ROW = CELL.rows[0].name


def trajectory(tokens: list[int], logits: list[list[float]] | None) -> Trajectory:
    steps = []
    for i, token in enumerate(tokens):
        values = None if logits is None else np.array(logits[i], dtype=np.float32)
        steps.append(Step(step=i, token=token, digest=f"{token}:{logits and logits[i]}",
                          top=((token, 0.0),), values=values))
    return Trajectory(rows={ROW: tuple(steps)}, dtype="float32")


def log_softmax(row: list[float]) -> list[float]:
    x = np.array(row, dtype=np.float64)
    return (x - np.log(np.exp(x).sum())).tolist()


A = [log_softmax([4.0, 0.0, 0.0]), log_softmax([0.0, 4.0, 0.0])]
B = [log_softmax([4.0, 0.0, 0.001]), log_softmax([0.0, 4.0, 0.0])]  # one logit moved


def test_equal_bits_pass_and_other_bits_fail_where_exact():
    judging = judging_for("invariant")
    same = second_judge(CELL, judging, True, trajectory([0, 1], A), trajectory([0, 1], A))
    assert same.passed
    assert same.detail == "1 greedy rows equal the batch oracle's bits (steps aside)"
    other = second_judge(CELL, judging, True, trajectory([0, 1], A), trajectory([0, 1], B))
    assert not other.passed and not other.stale and other.detail.endswith("(expected bit-exact)")


def test_other_bits_are_judged_by_kl_where_not_exact():
    judging = judging_for("invariant")
    verdict = second_judge(CELL, judging, False, trajectory([0, 1], A), trajectory([0, 1], B))
    assert verdict.passed and verdict.kl is not None and verdict.kl.max_kl < 1e-3


def test_a_golden_without_logprobs_is_stale_for_the_kl_judge():
    judging = judging_for("invariant")
    golden = trajectory([0, 1], None)
    verdict = second_judge(CELL, judging, False, golden, trajectory([0, 1], B))
    assert not verdict.passed and verdict.stale
    assert "the golden keeps no logprobs for the KL gate" in verdict.detail


C = [log_softmax([4.0, 0.0, 0.0]), log_softmax([0.0, 3.0, 0.0])]  # step 1 moved: KL ~0.026


def test_the_gate_is_the_callers_and_a_gpu_judges_16_bit_models_by_the_measured_noise(
        monkeypatch):
    import mlx.core as mx
    from mlx import nn

    from batchlab.judging.judging import SECOND_KL_GATE, SECOND_KL_GATE_GPU_16BIT
    from batchlab.judging.kl import KLGate

    judging = judging_for("invariant")
    golden, got = trajectory([0, 1], A), trajectory([0, 1], C)
    tight = second_judge(CELL, judging, False, golden, got)
    assert not tight.passed and "gate max KL <= 0.001, same top-1 >= 90%" in tight.detail
    loose = second_judge(CELL, judging, False, golden, got, SECOND_KL_GATE_GPU_16BIT)
    assert loose.passed and "gate max KL <= 0.5, same top-1 >= 85%" in loose.detail
    assert SECOND_KL_GATE_GPU_16BIT == KLGate(max_kl=0.5, min_same_top1=0.85)
    bf16, fp32 = nn.Linear(4, 4), nn.Linear(4, 4)
    bf16.set_dtype(mx.bfloat16)
    assert judging.second_gate(bf16) is SECOND_KL_GATE  # the CPU: unchanged
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.gpu, 0))
    assert judging.second_gate(bf16) is SECOND_KL_GATE_GPU_16BIT
    assert judging.second_gate(fp32) is SECOND_KL_GATE  # float32 rounding explains ~1e-6
