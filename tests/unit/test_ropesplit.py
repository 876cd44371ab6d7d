"""ropesplit.py: the invariant path's RoPE in launches MLX's CUDA backend accepts.

The launch shape is MLX's arithmetic (ported from ``get_block_dims_common``), checked here
at exact values; the split is checked bit for bit against the unsplit rotation on the
CPU (whose rope takes any batch). On the H200 ``tools/h200/rope_launch_probe.py`` shows
the unsplit launch refused and the split one equal to the rotation of 64-row slices.
"""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx import nn

from batchlab.engine.paths.invariant.ropesplit import (
    RowSplitRope,
    mlx_block_dims,
    rows_per_launch,
)
from batchlab.engine.paths.invariant.rowblock import blocked_model
from batchlab.zoo import load


def test_mlx_block_dims_spends_its_budget_on_z_when_the_rotary_dims_are_few():
    # the refused launch of issue 28: head dim 16 (8 pairs), 4 heads, 256 padded rows
    assert mlx_block_dims(8, 1, 256) == (8, 1, 128)
    assert mlx_block_dims(8, 1, 127) == (8, 1, 64)
    assert mlx_block_dims(8, 1, 33) == (8, 1, 32)
    assert mlx_block_dims(32, 1, 256) == (32, 1, 32)  # head dim 64: never past 64
    assert mlx_block_dims(64, 1, 1) == (64, 1, 1)
    assert mlx_block_dims(8, 16, 256) == (8, 16, 8)  # a prefill chunk of 16 tokens


def test_rows_per_launch_splits_only_where_the_block_would_pass_64_on_z():
    assert rows_per_launch(256, 4, 1, 8) == 127
    assert rows_per_launch(127, 4, 1, 8) == 127
    assert rows_per_launch(33, 32, 1, 8) == 15  # 8 z per row: 264 > 127
    assert rows_per_launch(256, 4, 1, 32) == 256  # head dim 64: one launch
    assert rows_per_launch(256, 32, 1, 64) == 256  # llama-3.1-8b's heads
    assert rows_per_launch(1, 512, 1, 8) == 1  # the single-token kernel: a 2-D grid
    with pytest.raises(ValueError, match="use path l1"):
        rows_per_launch(2, 512, 1, 8)


@pytest.mark.parametrize("model", ["llama", "qwen3"])
def test_the_split_rotation_equals_the_whole_batchs_bit_for_bit(model):
    """llama's Llama3RoPE (freqs kernel) and qwen3's nn.RoPE, 256 rows with their own
    offsets (as a padded decode batch's): three slices of 127, 127 and 2 rows."""
    rope = load(model).model.model.layers[0].self_attn.rope
    split = RowSplitRope(rope)
    x = mx.random.normal((256, 4, 1, 16), key=mx.random.key(3)).astype(mx.bfloat16)
    offsets = mx.random.randint(0, 500, (256,), key=mx.random.key(4)).astype(mx.int32)
    calls = []

    def spy(part, offset):
        calls.append((part.shape[0], offset.shape[0]))
        return rope(part, offset=offset)

    split.inner = spy
    got = split(x, offset=offsets)
    assert calls == [(127, 127), (127, 127), (2, 2)]
    want = rope(x, offset=offsets)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert bytes(memoryview(got.astype(mx.float32))) == bytes(memoryview(want.astype(mx.float32)))
    assert not mx.array_equal(got, x).item()  # it rotated
    # a batch MLX launches whole goes through in one call, the offset as given
    calls.clear()
    split(x[:64], offset=offsets[:64])
    assert calls == [(64, 64)]


def test_blocked_model_wraps_every_rope_once():
    model = load("llama").model
    clone = blocked_model(model, 4)
    ropes = [m for _, m in clone.named_modules() if isinstance(m, RowSplitRope)]
    assert len(ropes) == len(model.model.layers) == 2
    assert not any(isinstance(m, RowSplitRope) for _, m in model.named_modules())
    assert isinstance(load("qwen3").model.model.layers[0].self_attn.rope, nn.RoPE)
