"""What the CUDA grouped decode kernel (engine/kernels/grouped_decode.py) is handed and
when ``fast`` takes it, exact values on the CPU. The kernel itself is CUDA-only: its gate
is tools/h200/gqa_exact_probe.py on the H200 (its output equal to
``mx.fast.scaled_dot_product_attention``'s bit for bit, `EXACT OK yes`, and ``fast``'s
trajectories and logprobs with it equal to those without it)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from batchlab.engine.kernels import grouped_decode as gd
from batchlab.engine.kernels import grouped_decode_looped as looped
from batchlab.engine.paths.fast.path import FastScheduler, GroupedDecodeKV, UnmaskedDecodeKV


def test_the_kernel_fits_only_calls_of_mlx_s_one_pass_arithmetic():
    q = mx.zeros((4, 32, 1, 128), mx.bfloat16)
    k = mx.zeros((4, 8, 255, 128), mx.bfloat16)
    assert gd.fits(q, k, k, None, None)
    assert gd.fits(q, k[:, :, :1], k[:, :, :1], None, None)  # one key
    mask = mx.ones((4, 1, 1, 255), mx.bool_)
    assert not gd.fits(q, k, k, mask, None)  # an array mask: MLX's unfused attention
    assert not gd.fits(q, k, k, "causal", None)
    assert not gd.fits(q, k, k, None, mx.zeros((32,)))  # sinks
    assert not gd.fits(mx.zeros((4, 32, 2, 128), mx.bfloat16), k, k, None, None)  # prefill
    assert not gd.fits(q, k, k[..., :64], None, None)  # value dim != key dim
    assert not gd.fits(q, k.astype(mx.float32), k, None, None)  # mixed dtypes
    assert not gd.fits(q.astype(mx.int32), k.astype(mx.int32), k.astype(mx.int32), None, None)
    assert not gd.fits(mx.zeros((4, 30, 1, 128), mx.bfloat16), k, k, None, None)  # 30 % 8
    assert not gd.fits(mx.zeros((4, 64, 1, 128), mx.bfloat16), k, k, None, None)  # G*4 = 32
    assert gd.fits(mx.zeros((4, 8, 1, 128), mx.bfloat16), k, k, None, None)  # G = 1
    for dim, ok in ((64, True), (96, True), (128, True), (32, False), (80, False),
                    (256, False)):
        qd = mx.zeros((2, 8, 1, dim), mx.float32)
        kd = mx.zeros((2, 2, 10, dim), mx.float32)
        assert gd.fits(qd, kd, kd, None, None) is ok, dim
    q64 = mx.zeros((4, 64, 1, 64), mx.float16)
    k64 = mx.zeros((4, 8, 100, 64), mx.float16)
    assert gd.fits(q64, k64, k64, None, None)  # G = 8 at 2 dims a lane: 16


def test_keys_loaded_ahead_fit_64_registers():
    # measured: the most that compile without spills at 64 registers (nvcc 13.0, sm_90a)
    assert [gd.unroll(g, 64, 2) for g in (1, 2, 4, 8)] == [4, 4, 4, 1]
    assert [gd.unroll(g, 96, 2) for g in (1, 2, 4, 5)] == [4, 4, 2, 1]
    assert [gd.unroll(g, 96, 4) for g in (2, 4)] == [4, 1]
    assert [gd.unroll(g, 128, 2) for g in (1, 2, 4)] == [4, 2, 1]
    assert [gd.unroll(g, 128, 4) for g in (1, 2, 4)] == [4, 2, 1]


def test_the_looped_layout_fits_three_blocks_an_sm_at_the_8b_shape():
    # 32 streams x G x D floats of o, 3 x 32 x G of m, l, f, G reciprocals
    assert looped.shared_bytes(4, 128) == 4 * (32 * 4 * 128 + 3 * 32 * 4 + 4) == 67088
    assert looped.shared_bytes(1, 96) % 16 == 0
    per_sm, reserved = 228 * 1024, 1024  # H200: shared memory an SM, reserved a block
    assert 3 * (looped.shared_bytes(4, 128) + reserved) <= per_sm
    assert max(looped.shared_bytes(g, d) for g in (1, 2, 4, 8) for d in (64, 96, 128)
               if g * d // 32 <= gd.MAX_STATE) <= 227 * 1024  # one block's opt-in limit
    assert [looped.min_blocks(w) for w in looped.WARP_CHOICES] == [6, 3, 2]
    assert "__launch_bounds__(256, 3)" in looped.bounds(8)
    # measured: the most keys ahead that compile without spills (ptxas 12.9, sm_90a)
    assert [looped.unroll(4, 128, w) for w in (4, 8, 16)] == [2, 2, 1]
    assert [looped.unroll(2, 128, w) for w in (4, 8, 16)] == [4, 4, 2]
    assert [looped.unroll(1, 64, w) for w in (4, 8, 16)] == [4, 4, 4]


def test_the_layout_can_be_forced_by_the_environment(monkeypatch):
    monkeypatch.delenv("BATCHLAB_GQA_LAYOUT", raising=False)
    assert gd._forced_layout() is None
    monkeypatch.setenv("BATCHLAB_GQA_LAYOUT", "looped")
    assert gd._forced_layout() == "looped"
    monkeypatch.setenv("BATCHLAB_GQA_LAYOUT", "fast")
    with pytest.raises(ValueError, match="simple, staged, looped"):
        gd._forced_layout()
    monkeypatch.setattr(gd, "FORCED_LAYOUT", None)
    assert (gd.layout_for(4), gd.layout_for(3)) == ("looped", "looped")  # the default
    assert (gd.layout_for(4, "looped"), gd.layout_for(3, "looped")) == ("looped", "looped")
    assert (gd.layout_for(4, "simple"), gd.layout_for(3, "staged")) == ("simple", "simple")
    monkeypatch.setattr(gd, "FORCED_LAYOUT", "looped")
    assert gd.layout_for(4) == "looped"


def test_fast_takes_the_kernel_only_on_cuda():
    assert GroupedDecodeKV.groups_decode and not UnmaskedDecodeKV.groups_decode
    assert GroupedDecodeKV([0]).drops_all_true_decode_mask()
    if mx.default_device().type == mx.cpu:
        assert FastScheduler.caches.kv_class is UnmaskedDecodeKV


def test_the_dispatch_sends_fast_decode_calls_to_the_kernel_on_cuda(monkeypatch):
    from batchlab.engine.kernels import attention_dispatch as ad

    calls = []
    monkeypatch.setattr(ad, "on_cuda", lambda: True)
    monkeypatch.setattr(gd, "grouped_decode_attention",
                        lambda q, k, v, scale: calls.append(("kernel", k.shape[2])) or q)

    def mlx_lm_helper(q, k, v, cache=None, scale=1.0, mask=None, sinks=None):
        calls.append(("mlx-lm", k.shape[2]))
        return q

    dispatch = ad.make_dispatch(mlx_lm_helper)
    rows = [0] * 16  # 16 rows x 8 KV heads: 128 blocks, MIN_BLOCKS
    q = mx.zeros((16, 32, 1, 128), mx.bfloat16)
    k = mx.zeros((16, 8, 200, 128), mx.bfloat16)
    wide = mx.zeros((16, 8, 256, 128), mx.bfloat16)
    mask = mx.ones((16, 1, 1, 200), mx.bool_)
    dispatch(q, k, k, GroupedDecodeKV(rows), 0.1, None)
    dispatch(q, k, k, UnmaskedDecodeKV(rows), 0.1, None)  # GQA=0: MLX's kernel
    dispatch(q, k, k, GroupedDecodeKV(rows), 0.1, mask)  # a padded row: MLX's
    dispatch(q, wide, wide, GroupedDecodeKV(rows), 0.1, None)  # in place of cuDNN's
    dispatch(q, wide, wide, UnmaskedDecodeKV(rows), 0.1, None)  # GQA=0: cuDNN's
    dispatch(q[:15], k[:15], k[:15], GroupedDecodeKV(rows[:15]), 0.1, None)  # 120 blocks
    dispatch(q[:1], wide[:1], wide[:1], GroupedDecodeKV(rows[:1]), 0.1, None)  # 8, wide
    dispatch(mx.zeros((16, 32, 3, 128), mx.bfloat16), k, k, GroupedDecodeKV(rows), 0.1,
             "causal")  # prefill
    assert calls == [("kernel", 200), ("mlx-lm", 200), ("mlx-lm", 200), ("kernel", 256),
                     ("mlx-lm", 256), ("mlx-lm", 200), ("kernel", 256), ("mlx-lm", 200)]


def test_the_kernel_runs_from_one_block_per_sm_and_always_from_256_keys():
    # below 256 keys MLX's kernel, with G times as many blocks, wins at B=1 (same bits)
    assert not gd.takes(1, 8, 255) and not gd.takes(15, 8, 200)
    assert gd.takes(16, 8, 1) and gd.takes(256, 8, 255) and gd.takes(128, 1, 100)
    # from 256 keys MLX's choice is cuDNN, which does not repeat itself
    assert gd.takes(1, 8, 256) and gd.takes(1, 1, 5000)


def test_the_kernel_fits_any_key_count_and_stages_only_what_a_bucket_holds():
    q = mx.zeros((2, 8, 1, 64), mx.bfloat16)
    for width in (1, 255, 256, 1023, 1024, 4097):
        keys = mx.zeros((2, 4, width, 64), mx.bfloat16)
        assert gd.fits(q, keys, keys, None, None)
    assert not gd.fits(q, keys[:, :, :0], keys[:, :, :0], None, None)
    assert looped.can_stage(256, 4, 64, 2) and not looped.can_stage(257, 4, 64, 2)


def test_the_staged_layout_needs_a_power_of_two_group(monkeypatch):
    monkeypatch.setattr(gd, "LAYOUT", "staged")
    assert [gd.layout_for(g) for g in (1, 2, 4, 8)] == ["staged"] * 4
    assert [gd.layout_for(g) for g in (3, 5, 6)] == ["simple"] * 3


def test_looped_takes_two_streams_a_warp_from_wide_keys(monkeypatch):
    # without a ring (the default): W = 16 from WIDE_KEYS keys
    assert looped.warps_for(looped.WIDE_KEYS - 1, 4, 128, False) == looped.WARPS == 8
    assert looped.warps_for(looped.WIDE_KEYS, 4, 128, False) == 16
    assert looped.warps_for(255, 8, 64, False) == 8  # W = 16 spills there (unroll)
    # with one: W = 8 at 16 floats a lane (the 8B heads; D = 64, G = 8), else 16
    assert [looped.warps_for(k, 4, 128, True) for k in (1, 192, 255)] == [8, 8, 8]
    assert [looped.warps_for(k, 8, 64, True) for k in (1, 255)] == [8, 8]
    assert [looped.warps_for(k, 4, 64, True) for k in (1, 255)] == [16, 16]  # llama-3.2-1b
    assert looped.warps_for(192, 2, 128, True) == 16  # qwen3-0.6b
    monkeypatch.delenv("BATCHLAB_GQA_WARPS", raising=False)
    assert gd._forced_warps() is None
    monkeypatch.setenv("BATCHLAB_GQA_WARPS", "16")
    assert gd._forced_warps() == 16
    for bad in ("12", "many"):
        monkeypatch.setenv("BATCHLAB_GQA_WARPS", bad)
        with pytest.raises(ValueError, match="4, 8, 16"):
            gd._forced_warps()


def test_looped_rings_take_the_shared_memory_its_blocks_leave(monkeypatch):
    # a warp's ring: R slots of a K row and a V row
    assert looped.ring_bytes(128, 2, 16, 4) == 16 * 4 * 2 * 128 * 2 == 32768
    # off by default; the slots asked for wherever a block's shared memory (227 KiB)
    # holds them: 4 fit every shape
    assert looped.RING == 0 and looped.ring_slots(4, 128, 2, 8) == 0
    assert [looped.ring_slots(4, 128, 2, w, 4) for w in (4, 8, 16)] == [4, 4, 4]
    assert [looped.ring_slots(4, 64, 2, w, 4) for w in (4, 8, 16)] == [4, 4, 4]
    assert [looped.ring_slots(4, 128, 4, w, 4) for w in (4, 8, 16)] == [4, 4, 4]
    assert looped.ring_slots(8, 128, 4, 16, 8) == 0  # 131 KiB of merge arrays + 128 of rings
    # the 8B heads at W = 8: 65.5 KiB of merge arrays and 16 KiB of rings, two blocks an SM
    assert looped.shared_bytes(4, 128) + looped.ring_bytes(128, 2, 8, 4) == 67088 + 16384
    assert max(looped.shared_bytes(g, d) + looped.ring_bytes(d, size, 16, 8)
               for g in (1, 2, 4, 8) for d in (64, 128) for size in (2, 4)
               if g * d // 32 <= gd.MAX_STATE) <= looped.BLOCK_SHARED
    # a lane's share of a row must be a cp.async size: 4, 8 or 16 bytes, not head dim 96's
    assert looped.can_ring(64, 2) and looped.can_ring(128, 4)
    assert not looped.can_ring(96, 2) and not looped.can_ring(96, 4)
    assert [looped.ring_slots(4, 96, 2, w, 4) for w in (4, 8, 16)] == [0, 0, 0]
    monkeypatch.delenv("BATCHLAB_GQA_RING", raising=False)
    assert gd._forced_ring() is None
    monkeypatch.setenv("BATCHLAB_GQA_RING", "0")
    assert gd._forced_ring() == 0
    for bad in ("3", "16", "all"):
        monkeypatch.setenv("BATCHLAB_GQA_RING", bad)
        with pytest.raises(ValueError, match="0, 2, 4, 8"):
            gd._forced_ring()


def test_staging_sizes_a_kernel_per_bucket_and_only_where_the_rows_fit(monkeypatch):
    assert looped.STAGE is False  # off: slower a call at the 8B heads (issue28-stage/)
    assert [looped.stage_rows(k) for k in (1, 32, 33, 128, 129, 255)] == \
        [32, 32, 64, 128, 256, 256]
    assert looped.stage_bytes(192, 128, 2) == 2 * 256 * 128 * 2 == 131072
    assert looped.can_stage(255, 4, 128, 2)  # the 8B heads: 67088 + 16 + 131072
    assert not looped.can_stage(255, 4, 128, 4)  # float32: 262144 bytes of rows
    assert looped.can_stage(64, 4, 128, 4)
    assert looped.min_blocks(32) == 1 and "__launch_bounds__(1024, 1)" in looped.bounds(32)
    assert looped.stage_warps_for(8, 64) == 8 and looped.stage_warps_for(4, 128) == 16
    monkeypatch.setenv("BATCHLAB_GQA_STAGE", "1")
    assert gd._forced_stage() is True
    monkeypatch.setenv("BATCHLAB_GQA_STAGE", "yes")
    with pytest.raises(ValueError, match="0 or 1"):
        gd._forced_stage()
    monkeypatch.setenv("BATCHLAB_GQA_WARPS", "32")
    assert gd._forced_warps() == 32


def _mlx_butterfly(values: np.ndarray) -> np.ndarray:
    """MLX's warp_sum on each head: ``(G, 32)`` float32 lanes -> every lane's result."""
    x = values.copy()
    for off in (16, 8, 4, 2, 1):
        x = x + x[:, np.arange(32) ^ off]  # own value first, as the kernel adds them
    return x


def _split_butterfly(values: np.ndarray) -> np.ndarray:
    """The split sums as the kernel's text runs them (``H = 1``): a lane keeps half its
    heads at each of the first log2 G levels, then sums its one head; returns the score
    each lane ends on, ``(32,)``."""
    group = values.shape[0]
    held = [values[:, lane].copy() for lane in range(32)]  # a lane's heads, in order
    levels = group.bit_length() - 1
    for t in range(levels):
        off, half = 16 >> t, group >> (t + 1)
        sent = [h[:half] if lane & off else h[half:2 * half] for lane, h in enumerate(held)]
        held = [(h[half:2 * half] if lane & off else h[:half]) + sent[lane ^ off]
                for lane, h in enumerate(held)]
    score = np.array([h[0] for h in held], dtype=np.float32)
    off = 16 >> levels
    while off:
        score = score + score[np.arange(32) ^ off]
        off >>= 1
    return score


@pytest.mark.parametrize("group", [2, 4, 8, 16])
def test_split_sums_end_on_mlx_bits_for_the_lanes_head(group):
    # the lane's head is lane / (32 / G); its score must be MLX's bits for that head
    assert looped.can_split(group) and not any(map(looped.can_split, (1, 3, 6, 32)))
    rng = np.random.default_rng(group)
    for scale in (1.0, 1e-3, 1e30):  # mixed magnitudes: any reordering shows in the bits
        values = (rng.standard_normal((group, 32)) * scale
                  * rng.choice([1.0, 1e-7, 1e7], size=(group, 32))).astype(np.float32)
        mlx = _mlx_butterfly(values)
        assert (mlx == mlx[:, :1]).all()  # MLX's lanes all end on the same bits
        own = np.arange(32) // (32 // group)
        split = _split_butterfly(values)
        assert split.tobytes() == mlx[own, 0].tobytes()
        # a reordered tree (level 1 before 16) does not give MLX's bits: the test can fail
        reordered = values.copy()
        for off in (1, 2, 4, 8, 16):
            reordered = reordered + reordered[:, np.arange(32) ^ off]
        if scale == 1e30:
            assert reordered[:, 0].tobytes() != mlx[:, 0].tobytes()


def test_the_split_sums_switch_reads_the_environment(monkeypatch):
    assert looped.SPLIT is True  # on: MLX's bits, and faster at 8B B=256 (issue28-split/)
    assert "if (H) {" in looped.SOURCE and looped.SOURCE.count("__shfl_sync") == 6
    # with split sums W = 16 at every key count (no ring); MLX's sums keep W = 8 below
    # WIDE_KEYS, and the ring keeps its own choice
    assert looped.warps_for(128, 4, 128, False, split=True) == 16
    assert looped.warps_for(128, 4, 128, False) == looped.WARPS == 8
    assert looped.warps_for(128, 4, 128, True, split=True) == 8
    monkeypatch.setenv("BATCHLAB_GQA_SPLIT", "1")
    assert gd._forced_split() is True
    monkeypatch.setenv("BATCHLAB_GQA_SPLIT", "on")
    with pytest.raises(ValueError, match="0 or 1"):
        gd._forced_split()


def test_the_tiled_order_is_the_default_and_replaces_every_layout(monkeypatch):
    from batchlab.engine.kernels import grouped_decode_tiled as tiled

    assert gd.TILED is True  # judged on the H200 (reports/bench/cuda-sm90/issue28-tiled/)
    monkeypatch.setenv("BATCHLAB_GQA_TILED", "1")
    assert gd._forced_tiled() is True
    monkeypatch.setenv("BATCHLAB_GQA_TILED", "yes")
    with pytest.raises(ValueError, match="0 or 1"):
        gd._forced_tiled()
    calls = []
    monkeypatch.setattr(tiled, "tiled_decode_attention",
                        lambda q, k, v, scale: calls.append(k.shape) or q)
    q = mx.zeros((2, 32, 1, 128), mx.bfloat16)
    k = mx.zeros((2, 8, 300, 128), mx.bfloat16)
    assert gd.grouped_decode_attention(q, k, k, 0.1, tiled_order=True) is q
    monkeypatch.setattr(gd, "FORCED_TILED", True)
    assert gd.grouped_decode_attention(q, k, k, 0.1, layout="looped") is q
    monkeypatch.setattr(gd, "FORCED_TILED", None)
    assert gd.grouped_decode_attention(q, k, k, 0.1) is q  # the module's default
    assert calls == [(2, 8, 300, 128)] * 3


def test_the_tiled_kernel_splits_keys_only_where_rows_and_heads_leave_the_device_idle():
    from batchlab.engine.kernels import grouped_decode_tiled as tiled

    assert tiled.MIN_CHUNK == 256
    assert tiled.warps_for(256, 8) == 1 and tiled.warps_for(128, 8) == 1  # 1024 blocks
    assert tiled.warps_for(127, 8) == 2 and tiled.warps_for(1, 8) == 2
    assert tiled.num_chunks(256, 8, 255) == 1  # 2048 blocks: one launch, no combine
    assert tiled.num_chunks(256, 8, 4096) == 1
    assert tiled.num_chunks(64, 8, 4096) == 4  # 512 blocks x 4 chunks of 1024 keys
    assert tiled.num_chunks(1, 8, 4096) == 16  # chunks of 256 keys, no fewer
    assert tiled.num_chunks(1, 8, 300) == 2
    assert tiled.num_chunks(1, 8, 1) == 1
    # every chunk starts inside the keys: the kernel's ceil split leaves none empty here
    for width in (257, 300, 511, 4096):
        chunks = tiled.num_chunks(1, 8, width)
        size = -(-width // chunks)
        assert (chunks - 1) * size < width
