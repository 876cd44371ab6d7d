"""What the CUDA grouped decode kernel (engine/kernels/grouped_decode.py) is handed and
when ``fast`` takes it, exact values on the CPU. The kernel itself is CUDA-only: its
gate is tools/h200/gqa_decode_probe.py on the H200 (against float32, `GQA OK yes`) and
``lab kl --paths fast`` there."""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.kernels import grouped_decode as gd
from batchlab.engine.paths.fast import FastScheduler, GroupedDecodeKV, UnmaskedDecodeKV


def test_lanes_per_key_fill_a_warp():
    assert gd.lanes_per_key(128, 2) == (32, 4)  # 8-byte loads, one warp a key
    assert gd.lanes_per_key(64, 2) == (16, 4)  # two keys a warp
    assert gd.lanes_per_key(256, 2) == (32, 8)  # 16-byte loads
    assert gd.lanes_per_key(64, 4) == (16, 4)  # float32: 16-byte loads
    assert gd.lanes_per_key(16, 2) == (4, 4)
    assert gd.lanes_per_key(96, 2) == (0, 0)  # 24 lanes do not divide a warp
    assert gd.lanes_per_key(512, 2) == (0, 0)


def test_which_calls_the_kernel_takes():
    q = mx.zeros((4, 32, 1, 128), mx.bfloat16)
    k = mx.zeros((4, 8, 300, 128), mx.bfloat16)
    mask = mx.ones((4, 1, 1, 300), mx.bool_)
    assert gd.fits(q, k, k, None, None)
    assert gd.fits(q, k, k, mask, None)
    assert gd.fits(q, k, k, mask[:1], None)  # one mask for every row
    assert not gd.fits(q, k, k, mask[..., :299], None)  # not the served keys
    assert not gd.fits(q, k, k, mask.astype(mx.bfloat16), None)  # additive
    assert not gd.fits(q, k, k, "causal", None)
    assert not gd.fits(q, k, k, None, mx.zeros((32,)))  # sinks
    assert not gd.fits(mx.zeros((4, 32, 2, 128), mx.bfloat16), k, k, None, None)  # prefill
    assert not gd.fits(q, k, k[..., :64], None, None)  # value dim != key dim
    assert not gd.fits(q, k.astype(mx.float32), k, None, None)  # mixed dtypes
    assert not gd.fits(mx.zeros((4, 72, 1, 128), mx.bfloat16), k, k, None, None)  # G = 9
    assert not gd.fits(mx.zeros((4, 30, 1, 128), mx.bfloat16), k, k, None, None)  # 30 % 8
    assert gd.fits(mx.zeros((4, 8, 1, 128), mx.bfloat16), k, k, None, None)  # G = 1
    long = mx.zeros((4, 8, 1025, 128), mx.bfloat16)  # MLX's two-pass kernel's, untouched
    assert not gd.fits(q, long, long, None, None)
    assert gd.fits(q, long[:, :, :1024], long[:, :, :1024], None, None)
    q96 = mx.zeros((4, 32, 1, 96), mx.bfloat16)
    k96 = mx.zeros((4, 8, 300, 96), mx.bfloat16)
    assert not gd.fits(q96, k96, k96, None, None)


def test_keys_split_into_chunks_of_at_least_256_for_enough_blocks():
    assert gd.num_chunks(256, 8, 512) == 1  # 2048 blocks: one launch
    assert gd.num_chunks(1, 8, 256) == 1  # B=1 at the bench's widths: one launch
    assert gd.num_chunks(1, 8, 4096) == 16
    assert gd.num_chunks(64, 8, 2048) == 4
    assert gd.num_chunks(32, 8, 2048) == 8


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
                        lambda q, k, v, scale, mask: calls.append(("kernel", k.shape[2])) or q)

    def mlx_lm_helper(q, k, v, cache=None, scale=1.0, mask=None, sinks=None):
        calls.append(("mlx-lm", k.shape[2]))
        return q

    dispatch = ad.make_dispatch(mlx_lm_helper)
    q = mx.zeros((2, 32, 1, 128), mx.bfloat16)
    k = mx.zeros((2, 8, 300, 128), mx.bfloat16)
    long = mx.zeros((2, 8, 1025, 128), mx.bfloat16)
    dispatch(q, k, k, GroupedDecodeKV([0, 0]), 0.1, None)
    dispatch(q, k, k, UnmaskedDecodeKV([0, 0]), 0.1, None)  # GQA=0: MLX's kernel
    dispatch(q, long, long, GroupedDecodeKV([0, 0]), 0.1, None)  # MLX's two-pass kernel
    dispatch(mx.zeros((2, 32, 3, 128), mx.bfloat16), k, k, GroupedDecodeKV([0, 0]), 0.1,
             "causal")  # prefill
    assert calls == [("kernel", 300), ("mlx-lm", 300), ("mlx-lm", 1025), ("mlx-lm", 300)]
