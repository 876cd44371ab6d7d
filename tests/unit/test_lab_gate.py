"""Lab paths: the fast path's mask rule, and the KL gate for cells that are not bit-exact."""

import dataclasses

import mlx.core as mx
import numpy as np

from batchlab.cells.result import CellResult
from batchlab.cells.spec import expand
from batchlab.engine.paths.fast.path import UnmaskedDecodeKV
from batchlab.golden.store import Golden, Stamp
from batchlab.judging.compare import first_divergence
from batchlab.judging.judging import judging_for
from batchlab.judging.kl import kl_stats
from batchlab.matrix.evaluate import _lab_gate
from batchlab.trajectory import Step, Trajectory


def test_fast_kv_drops_only_all_true_decode_masks():
    kv = UnmaskedDecodeKV([0, 0])
    kv.update_and_fetch(mx.zeros((2, 1, 3, 4)), mx.zeros((2, 1, 3, 4)))
    assert kv.make_mask(1) is None
    assert kv.make_mask(2).shape == (2, 1, 2, 5)  # prefill keeps its causal mask
    assert kv.make_mask(1, window_size=2).tolist() == [[[[False, False, True, True]]]] * 2
    padded = UnmaskedDecodeKV([1, 0])
    padded.update_and_fetch(mx.zeros((2, 1, 3, 4)), mx.zeros((2, 1, 3, 4)))
    assert padded.make_mask(1).tolist() == [[[[False, True, True, True]]],
                                            [[[True, True, True, True]]]]


def steps(rows: list[list[float]], tokens: list[int]) -> tuple[Step, ...]:
    out = []
    for i, (row, token) in enumerate(zip(rows, tokens)):
        values = np.log(np.array(row, dtype=np.float32))
        out.append(Step(step=i, token=token, digest=values.tobytes().hex()[:16],
                        top=((token, float(values[token])),), values=values))
    return tuple(out)


def test_kl_stats_are_exact_on_a_small_case():
    ref = Trajectory(rows={"A": steps([[0.5, 0.5], [0.9, 0.1]], [0, 0])}, dtype="float32")
    got = Trajectory(rows={"A": steps([[0.5, 0.5], [0.6, 0.4]], [0, 0])}, dtype="float32")
    stats = kl_stats(ref, got)
    expected = 0.9 * np.log(0.9 / 0.6) + 0.1 * np.log(0.1 / 0.4)
    assert stats.steps == 2
    assert np.isclose(stats.max_kl, expected, rtol=1e-5)
    assert stats.same_top1 == 1.0
    assert np.isclose(stats.rms_dp, np.sqrt((0.3**2 + 0.3**2) / 4), rtol=1e-5)


def test_kl_renormalises_rounded_logprobs():
    """Rounded logprobs (bf16's) do not sum to one; KL is taken after renormalising, so
    the same distribution at another rounding gives ~0, never a negative KL."""
    ref = Trajectory(rows={"A": steps([[0.51, 0.51]], [0])}, dtype="float32")  # sums to 1.02
    got = Trajectory(rows={"A": steps([[0.5, 0.5]], [0])}, dtype="float32")
    assert abs(kl_stats(ref, got).max_kl) < 1e-12
    lopsided = Trajectory(rows={"A": steps([[0.7, 0.35]], [0])}, dtype="float32")
    assert kl_stats(lopsided, got).max_kl > 0


def test_kl_comparison_stops_after_the_first_different_token():
    ref = Trajectory(rows={"A": steps([[0.6, 0.4], [0.9, 0.1], [0.9, 0.1]], [0, 0, 0])},
                     dtype="float32")
    got = Trajectory(rows={"A": steps([[0.4, 0.6], [0.1, 0.9], [0.1, 0.9]], [1, 1, 1])},
                     dtype="float32")
    stats = kl_stats(ref, got)
    assert stats.steps == 1 and stats.same_top1 == 0.0


def gate_result(path: str, got_rows: list[list[float]]):
    cell = dataclasses.replace(expand({"sweep": [{
        "models": ["llama"], "batch": [1], "padding": ["equal"], "scripts": ["static"],
        "contexts": ["short"]}]})[0], path=path)
    ref = Trajectory(rows={"A": steps([[0.7, 0.3], [0.8, 0.2]], [0, 0])}, dtype="float32")
    got = Trajectory(rows={"A": steps(got_rows, [0, 0])}, dtype="float32")
    stamp = Stamp(cell_id="x", definition_digest="", backend="", versions={},
                  fingerprint="", schedule={})
    golden = Golden(stamp=stamp, oracle="t", dtype="float32", serial_check="agrees",
                    oracle_bug=None, trajectory=ref)
    divergence = first_divergence(ref, got, ["A"])

    def result(status, detail, **kw):
        return CellResult.of(cell, status=status, detail=detail, rerun="", seconds=0, **kw)

    return _lab_gate(cell, judging_for(cell.path), golden, got, divergence, result, tokens=2)


def test_l1_has_no_tolerance_and_fast_is_kl_gated():
    close = [[0.7001, 0.2999], [0.8, 0.2]]
    assert judging_for("l1").kl_gate is None
    assert gate_result("l1", close).status == "FAIL"
    passed = gate_result("fast", close)
    assert passed.status == "PASS" and passed.kl["max_kl"] < 1e-6
    assert "not bit-exact" in passed.detail
    far = gate_result("fast", [[0.7, 0.3], [0.3, 0.7]])
    assert far.status == "FAIL" and far.kl["same_top1"] == 0.5


def test_fast_on_a_gpu_is_judged_by_the_noise_of_two_correct_attentions(monkeypatch):
    from mlx import nn

    from batchlab.judging.kl import FAST_KL_GATE_GPU_16BIT, LAB_KL_GATE, KLGate

    # KL 0.007 at step 1, top-1 kept: inside the GPU gate, outside LAB_KL_GATE
    noisy = [[0.7, 0.3], [0.75, 0.25]]
    assert gate_result("fast", noisy).status == "FAIL"  # the CPU: LAB_KL_GATE
    assert FAST_KL_GATE_GPU_16BIT == KLGate(max_kl=0.02, min_same_top1=0.9, free_misses=1)
    bf16, fp32 = nn.Linear(4, 4), nn.Linear(4, 4)
    bf16.set_dtype(mx.bfloat16)
    fast, compiled = judging_for("fast"), judging_for("compiled")
    assert fast.lab_gate(bf16) is LAB_KL_GATE and compiled.lab_gate(bf16) is LAB_KL_GATE
    monkeypatch.setattr(mx, "default_device", lambda: mx.Device(mx.gpu, 0))
    assert fast.lab_gate(bf16) is FAST_KL_GATE_GPU_16BIT
    assert fast.lab_gate(fp32) is LAB_KL_GATE  # float32 rounding explains ~1e-6
    assert compiled.lab_gate(bf16) is LAB_KL_GATE  # its difference is not attention's
    assert judging_for("l1").lab_gate(bf16) is None
    passed = gate_result("fast", noisy)  # the zoo llama is bf16
    assert passed.status == "PASS" and "gate max KL <= 0.02, same top-1 >= 90%" in passed.detail
    # a bug's KL (fast's seeded bugs: 0.13 and up) stays outside
    assert gate_result("fast", [[0.7, 0.3], [0.4, 0.6]]).status == "FAIL"


def test_fast_on_a_gpu_may_flip_once_however_few_its_steps_and_no_other_gate_may():
    from batchlab.judging.kl import FAST_KL_GATE_GPU_16BIT, LAB_KL_GATE, KLStats

    def stats(steps: int, same: int, max_kl: float = 1e-3) -> KLStats:
        return KLStats(steps=steps, mean_kl=max_kl / 2, median_kl=max_kl / 2, p99_kl=max_kl,
                       max_kl=max_kl, same_top1=same / steps, rms_dp=0.0)

    gate = FAST_KL_GATE_GPU_16BIT
    # one row flipping on a near-tie at step 6 (the H200's one-row cells): its one miss
    assert gate.admits(stats(6, 5)) and gate.admits(stats(2, 1))
    assert not gate.admits(stats(7, 5))  # two misses in 7 steps
    assert not gate.admits(stats(6, 5, max_kl=0.03))  # the KL still judges
    assert gate.admits(stats(10, 9)) and gate.admits(stats(40, 36))
    assert not gate.admits(stats(20, 17))  # over 10 steps, the share alone
    assert not LAB_KL_GATE.admits(stats(6, 5, max_kl=1e-4))  # no free miss elsewhere
    assert LAB_KL_GATE.admits(stats(100, 99, max_kl=1e-4))
    assert gate.describe() == "gate max KL <= 0.02, same top-1 >= 90% (or at most 1 miss)"
    assert LAB_KL_GATE.describe() == "gate max KL <= 0.001, same top-1 >= 99%"
