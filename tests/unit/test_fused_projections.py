"""``fused_projections``: one GEMM per q/k/v and gate/up group inside ``fused()``, the
plain layers outside it (fast: one row on CUDA and the CPU; from 64 rows with
BATCHLAB_FAST_FUSE=1 on CUDA). Exact values on the CPU: small-integer weights and inputs
make every order of summation exact."""

from __future__ import annotations

import mlx.core as mx
from mlx import nn
from mlx_lm.models import llama

from batchlab.engine.paths.fast.fused_projections import (
    GATE_UP,
    ONE_ROW_GROUPS,
    QKV,
    FusedMemberLinear,
    columns,
    fuse_projections,
    fused,
    fused_model,
)


def tiny_llama(bias: bool = False) -> nn.Module:
    args = llama.ModelArgs(
        model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=48,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-5,
        vocab_size=50, rope_theta=10000.0, tie_word_embeddings=False, attention_bias=bias,
    )  # fmt: skip
    model = llama.Model(args)
    leaves = {}
    for i, (name, p) in enumerate(sorted(nn.utils.tree_flatten(model.parameters()))):
        leaves[name] = mx.random.randint(-3, 4, p.shape, key=mx.random.key(i)).astype(p.dtype)
    model.update(nn.utils.tree_unflatten(list(leaves.items())))
    return model


def test_every_group_is_fused_once():
    model = tiny_llama()
    assert fuse_projections(model) == 4  # q/k/v and gate/up in each of 2 layers
    assert fuse_projections(model) == 0  # idempotent
    attn = model.model.layers[0].self_attn
    assert type(attn.q_proj) is FusedMemberLinear and type(attn.o_proj) is nn.Linear
    assert type(model.model.layers[1].self_attn.v_proj) is FusedMemberLinear
    mlp = model.model.layers[1].mlp
    assert type(mlp.up_proj) is FusedMemberLinear and type(mlp.down_proj) is nn.Linear
    # the parameters are untouched: nothing is added to the tree
    names = [n for n, _ in nn.utils.tree_flatten(model.parameters())]
    assert not any("fused" in n for n in names) and len(names) == 2 * 9 + 3


def test_inside_fused_one_product_serves_the_group_with_the_same_values():
    for bias in (False, True):
        model = tiny_llama(bias)
        x = mx.random.randint(-2, 3, (3, 1, 32), key=mx.random.key(99)).astype(mx.float32)
        attn = model.model.layers[0].self_attn
        plain = [attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)]
        fuse_projections(model)
        outside = [attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)]
        with fused():
            inside = [attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)]
            group = attn.q_proj._fused_group
            assert group.last_x is x and group.ranges == [(0, 32), (32, 48), (48, 64)]
            assert inside[1] is group.last_parts[1]  # k read q's product, no GEMM of its own
            q_and_k = columns(attn.q_proj, x, 0, 1)
        for a, b, c in zip(plain, outside, inside, strict=True):
            assert a.shape == c.shape
            assert mx.array_equal(a, b).item() and mx.array_equal(a, c).item()
        assert mx.array_equal(q_and_k, mx.concatenate(plain[:2], axis=-1)).item()
        assert columns(attn.q_proj, x, 0, 1) is None  # outside fused()


def test_only_the_active_groups_and_unbiased_ones_when_asked_are_fused():
    model = tiny_llama(bias=True)  # q/k/v biased, gate/up not
    fuse_projections(model)
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    x = mx.random.randint(-2, 3, (1, 32), key=mx.random.key(5)).astype(mx.float32)
    with fused((QKV,)):
        attn.q_proj(x), mlp.gate_proj(x)
        assert attn.q_proj._fused_group.last_x is x and mlp.gate_proj._fused_group.last_x is None
        with fused(ONE_ROW_GROUPS, biased=False):  # nested: the innermost decides
            y = mx.random.randint(-2, 3, (1, 32), key=mx.random.key(6)).astype(mx.float32)
            attn.k_proj(y), mlp.up_proj(y)
            assert attn.q_proj._fused_group.last_x is x  # biased: k made its own product
            assert mlp.gate_proj._fused_group.last_x is y
            assert columns(attn.q_proj, y, 0, 1) is None
        assert columns(attn.q_proj, x, 0, 1) is not None
    assert set(ONE_ROW_GROUPS) == {QKV, GATE_UP}


def test_the_fused_model_is_one_clone_per_model_and_leaves_the_original_plain():
    model = tiny_llama()
    clone = fused_model(model)
    assert fused_model(model) is clone  # the concatenated weights are made once
    assert type(clone.model.layers[0].self_attn.q_proj) is FusedMemberLinear
    assert type(model.model.layers[0].self_attn.q_proj) is nn.Linear
    o_proj = model.model.layers[0].self_attn.o_proj
    assert clone.model.layers[0].self_attn.o_proj.weight is o_proj.weight  # shared
    tokens = mx.array([[3, 1, 4]])
    with fused(ONE_ROW_GROUPS):
        assert mx.array_equal(clone(tokens), model(tokens)).item()
    assert fused_model(tiny_llama()) is not clone


def test_a_quantized_or_mismatched_group_stays_plain():
    model = tiny_llama()
    nn.quantize(model.model.layers[1].self_attn, group_size=32, bits=8)
    assert fuse_projections(model) == 3  # layer 1's q/k/v are QuantizedLinear
    assert type(model.model.layers[1].self_attn.q_proj) is nn.QuantizedLinear


def test_fast_fuses_one_row_on_the_cpu_and_on_cuda_and_from_64_rows_when_switched_on(
        monkeypatch):
    from contextlib import contextmanager

    from batchlab.engine.paths.fast import fused_projections
    from batchlab.engine.paths.fast import path as fast

    entered = []

    @contextmanager
    def spy(groups, biased=True):
        entered.append((set(groups), biased))
        yield

    monkeypatch.setattr(fast, "fused", spy)

    def steps(scheduler, model):
        entered.clear()
        for rows in (1, 63, 64):
            caches = scheduler.caches.fresh(model, rows)
            scheduler._decode_logprobs(mx.zeros((rows,), mx.int32), caches)
        return list(entered)

    one_row = [({QKV, GATE_UP}, False)]
    monkeypatch.setattr(fused_projections, "on_cuda", lambda: False)
    monkeypatch.setattr(fused_projections.mx, "default_device", lambda: mx.Device(mx.gpu))
    model = tiny_llama()
    scheduler = fast.FastScheduler(model)  # Metal: nothing fused
    assert type(model.model.layers[0].self_attn.q_proj) is nn.Linear
    assert steps(scheduler, model) == []
    monkeypatch.undo()
    monkeypatch.setattr(fast, "fused", spy)
    scheduler = fast.FastScheduler(model)  # the CPU: one row fused (a clone), no kernel
    assert type(scheduler.model.model.layers[0].self_attn.q_proj) is FusedMemberLinear
    assert type(model.model.layers[0].self_attn.q_proj) is nn.Linear
    assert scheduler.caches.kv_class is fast.UnmaskedDecodeKV
    assert steps(scheduler, model) == one_row
    monkeypatch.setattr(fast, "on_cuda", lambda: True)
    scheduler = fast.FastScheduler(model)  # CUDA, nothing set: the kernel, no fusion
    assert scheduler.caches.kv_class is fast.GroupedDecodeKV
    assert steps(scheduler, model) == []
    monkeypatch.setenv("BATCHLAB_FAST_ONE_ROW", "1")
    assert steps(fast.FastScheduler(model), model) == one_row
    monkeypatch.setenv("BATCHLAB_FAST_GQA", "0")
    monkeypatch.setenv("BATCHLAB_FAST_FUSE", "1")
    scheduler = fast.FastScheduler(model)
    assert scheduler.caches.kv_class is fast.UnmaskedDecodeKV
    assert steps(scheduler, model) == one_row + [({QKV}, True)]  # and the 64-row step
