"""``kv_product``: a layer's k and v projections as one GEMM from two rows, used only where
that GEMM is measured to give both their bits. Random bf16 values: the products are
compared byte for byte, as the fast cells compare the path's logprobs."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx import nn

from batchlab.engine.paths import kv_product
from batchlab.engine.paths.fused_projections import FusedMemberLinear, fuse_projections, fused
from tests.unit.test_fused_projections import tiny_llama


@pytest.fixture(autouse=True)
def fresh_verdicts(monkeypatch):
    monkeypatch.setattr(kv_product, "_VERDICTS", {})


def attention(bias: bool = False, dims=(64, 16)) -> nn.Module:
    attn = nn.Module()
    attn.k_proj = nn.Linear(*dims, bias=bias)
    attn.v_proj = nn.Linear(*dims, bias=bias)
    attn.update(nn.utils.tree_map(lambda p: p.astype(mx.bfloat16), attn.parameters()))
    return attn


def rows(n: int, width: int = 64) -> mx.array:
    return mx.random.normal((n, width), key=mx.random.key(n)).astype(mx.bfloat16)


def same(a: mx.array, b: mx.array) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and mx.array_equal(a, b).item()


@pytest.mark.parametrize("n", [2, 3, 64, 129])
def test_the_one_gemm_gives_each_projection_its_bits(n):
    attn, x = attention(), rows(n)
    keys, values = kv_product.keys_and_values(attn, x)
    assert same(keys, attn.k_proj(x)) and same(values, attn.v_proj(x))
    assert kv_product._VERDICTS == {
        (str(mx.default_device()), n, (16, 64), (16, 64), "mlx.core.bfloat16",
         "mlx.core.bfloat16"): True}


def test_a_shape_whose_product_differs_keeps_two_gemms(monkeypatch):
    calls = []

    def differs(*args):
        calls.append(args[3])
        return False

    monkeypatch.setattr(kv_product, "same_bits", differs)
    attn = attention()
    assert kv_product.keys_and_values(attn, rows(4)) is None
    assert kv_product.keys_and_values(attn, rows(4)) is None
    assert calls == [4]  # the verdict is measured once per shape


def test_same_bits_compares_every_column_of_both():
    attn = attention()
    k, v = attn.k_proj.weight, attn.v_proj.weight
    assert kv_product.same_bits(k, v, mx.concatenate([k, v]), 5, mx.bfloat16)
    nudged = mx.concatenate([k, v]).astype(mx.float32)
    for row in (0, 31):  # a column of k's and the last of v's
        w = nudged.at[row, 0].add(1.0).astype(mx.bfloat16)
        assert not kv_product.same_bits(k, v, w, 5, mx.bfloat16)
    assert not kv_product.same_bits(k, v, mx.concatenate([v, k]), 5, mx.bfloat16)


def test_one_row_biased_quantized_and_mixed_layers_are_left_alone():
    assert kv_product.keys_and_values(attention(), rows(1)) is None
    assert kv_product.keys_and_values(attention(bias=True), rows(4)) is None
    quantized = attention(dims=(64, 32))
    quantized.k_proj = nn.QuantizedLinear.from_linear(quantized.k_proj, group_size=32)
    assert kv_product.keys_and_values(quantized, rows(4)) is None
    mixed = attention()
    mixed.v_proj = nn.Linear(32, 16)
    assert kv_product.keys_and_values(mixed, rows(4)) is None
    assert kv_product._VERDICTS == {}


def test_new_weights_make_a_new_kv_weight():
    attn, x = attention(), rows(3)
    kv_product.keys_and_values(attn, x)
    attn.k_proj.weight = attn.k_proj.weight * 2
    keys, values = kv_product.keys_and_values(attn, x)
    assert same(keys, attn.k_proj(x)) and same(values, attn.v_proj(x))


def test_fused_members_take_part_only_outside_their_group():
    model = tiny_llama()
    fuse_projections(model)
    attn, x = model.layers[0].self_attn, rows(3, width=32).astype(mx.float32)
    assert type(attn.k_proj) is FusedMemberLinear
    keys, values = kv_product.keys_and_values(attn, x)
    assert same(keys, x @ attn.k_proj.weight.T) and same(values, x @ attn.v_proj.weight.T)
    with fused():
        assert kv_product.keys_and_values(attn, x) is None


def test_the_switch(monkeypatch):
    monkeypatch.setenv("BATCHLAB_FAST_KV", "0")
    assert not kv_product.switched_on()
    monkeypatch.delenv("BATCHLAB_FAST_KV")
    assert kv_product.switched_on()
