"""``chain_decode``: fast's one-row step through ``row_chain``'s kernels (CUDA, opt-in).

The kernels run only on CUDA; here each is replaced by the MLX ops it folds together, in
the modules' order, so the chain's wiring (which weights, norms, RoPE and residuals go
where, and the attention and cache between) must give the flat forward's bits on the CPU.
The kernels' own arithmetic is checked on the H200 (``tools/h200/chain_probe.py``) and by
the CUDA matrix's fast cells with ``BATCHLAB_FAST_CHAIN=1``."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx import nn
from mlx_lm.models import gemma, llama
from mlx_lm.models.activations import swiglu
from mlx_lm.models.rope_utils import initialize_rope
from test_flat_decode import COMMON, emissions, tiny

from batchlab.engine.kernels import row_chain
from batchlab.engine.paths.fast import chain_decode


def _module_ops(monkeypatch, model: nn.Module) -> None:
    """row_chain's three kernels as the modules' own ops (the same bits as flat_decode)."""
    rope = model.model.layers[0].self_attn.rope

    def norm_qkv(x, norm_w, eps, wq, wk, wv, heads, rotate):
        n_q, n_kv, dim = heads
        xn = mx.fast.rms_norm(x, norm_w, eps.item())
        q = (xn @ wq.T).reshape(1, n_q, 1, dim)
        k = (xn @ wk.T).reshape(1, n_kv, 1, dim)
        if rotate is not None:  # rotation's stand-in below hands the offset on
            q, k = rope(q, offset=rotate), rope(k, offset=rotate)
        return q, k, (xn @ wv.T).reshape(1, n_kv, 1, dim)

    def norm_swiglu(h, norm_w, eps, wg, wu):
        xn = mx.fast.rms_norm(h, norm_w, eps.item())
        return swiglu(xn @ wg.T, xn @ wu.T)

    monkeypatch.setattr(row_chain, "rotation", lambda offset, inv_freq: offset)
    monkeypatch.setattr(row_chain, "norm_qkv", norm_qkv)
    monkeypatch.setattr(row_chain, "residual_product", lambda h, w, a: h + a @ w.T)
    monkeypatch.setattr(row_chain, "norm_swiglu", norm_swiglu)


def chain_emissions(monkeypatch, model: nn.Module, lengths: tuple[int, ...],
                    drop_attention_residual: bool = False):
    from batchlab.engine.paths.fast import path as fast

    calls = []
    real = chain_decode.RowChain.logits

    def counted(self, tokens, caches):
        calls.append(tokens.shape[0])
        return real(self, tokens, caches)

    _module_ops(monkeypatch, model)
    if drop_attention_residual:
        monkeypatch.setattr(row_chain, "residual_product",
                            lambda h, w, a: a @ w.T if w.shape[1] == 32 else h + a @ w.T)
    monkeypatch.setattr(chain_decode.RowChain, "logits", counted)
    built = fast.FastScheduler.__init__

    def with_chain(self, *args, **kwargs):
        built(self, *args, **kwargs)
        self._chain = chain_decode.RowChain(self.model)

    monkeypatch.setattr(fast.FastScheduler, "__init__", with_chain)
    return emissions(model, True, False, lengths), calls


@pytest.mark.parametrize("family,tied", [("llama", False), ("llama", True), ("qwen3", False)])
@pytest.mark.parametrize("lengths", [(5,), (5, 9, 3)])
def test_the_chain_is_wired_as_the_modules(monkeypatch, family, tied, lengths):
    # one row from the start, or three that drain to one, with a joiner (a padded row
    # alone at the end: its step has a mask)
    model = tiny(family, tied)
    plain = emissions(model, True, False, lengths)
    chained, calls = chain_emissions(monkeypatch, model, lengths)
    assert calls and set(calls) == {1}
    assert len(chained) == sum(6 + i for i in range(len(lengths))) + 4
    assert chained == plain


def test_a_chain_that_drops_the_attention_residual_differs(monkeypatch):
    # the wiring test can fail: o_proj's residual left out (o's weight is 32 wide here,
    # down's 48) and the bits change
    model = tiny("llama")
    plain = emissions(model, True, False, (5,))
    chained, calls = chain_emissions(monkeypatch, model, (5,), drop_attention_residual=True)
    assert calls and chained != plain


def test_llama_and_qwen3_models_take_it_and_others_say_why():
    assert chain_decode.unsupported_reason(tiny("llama")) is None
    assert chain_decode.unsupported_reason(tiny("qwen3")) is None
    gem = gemma.Model(gemma.ModelArgs(model_type="gemma", **COMMON))
    assert "llama or qwen3" in chain_decode.unsupported_reason(gem)
    biased = llama.Model(llama.ModelArgs(model_type="llama", **COMMON, attention_bias=True))
    assert "self_attn.q_proj is not an unbiased nn.Linear" in \
        chain_decode.unsupported_reason(biased)
    odd = llama.Model(llama.ModelArgs(model_type="llama", **{**COMMON, "hidden_size": 34}))
    assert "whole 16-byte chunks" in chain_decode.unsupported_reason(odd)


def test_qwen3_rotates_with_its_module_and_llama_in_the_kernel():
    assert chain_decode.RowChain(tiny("qwen3")).inv_freq is None  # q/k norms come first
    assert chain_decode.RowChain(tiny("llama")).inv_freq is not None


@pytest.mark.parametrize("scaling", [None, {"rope_type": "llama3", "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64}])
def test_the_kernels_rope_angles_are_the_modules(scaling):
    rope = initialize_rope(16, 500000.0, False, scaling, max_position_embeddings=4096)
    inv = np.array(row_chain.rope_inverse_frequencies(rope))
    x = mx.random.normal((1, 1, 1, 16), key=mx.random.key(3))
    offset = 1234
    expected = np.array(rope(x, offset=offset)).reshape(16)
    theta = np.float32(offset) * inv
    x1, x2 = np.array(x).reshape(16)[:8], np.array(x).reshape(16)[8:]
    ours = np.concatenate([x1 * np.cos(theta) - x2 * np.sin(theta),
                           x1 * np.sin(theta) + x2 * np.cos(theta)])
    np.testing.assert_allclose(ours, expected, rtol=0, atol=2e-4)


def test_the_rotation_table_is_cos_and_sin_of_the_offsets_angles():
    inv = mx.array([1.0, 0.5, 0.001], dtype=mx.float32)
    cos, sin = row_chain.rotation(mx.array([7], dtype=mx.int32), inv)
    theta = np.float32(7) * np.array([1.0, 0.5, 0.001], dtype=np.float32)
    np.testing.assert_array_equal(np.array(cos), np.cos(theta))
    np.testing.assert_array_equal(np.array(sin), np.sin(theta))


def test_modules_the_kernel_cannot_rotate_are_left_to_the_module():
    assert row_chain.rope_inverse_frequencies(nn.RoPE(16, traditional=True)) is None
    assert row_chain.rope_inverse_frequencies(object()) is None


def test_slices_split_k_until_the_launch_fills_the_device():
    bf = mx.bfloat16
    # llama-3.2-1b: q/k/v (1536 pairs), o and down (1024 pairs), gate/up (8192 rows)
    assert row_chain.slices_for(1536, 2048, bf) == 4
    assert row_chain.slices_for(1024, 2048, bf) == 8
    assert row_chain.slices_for(1024, 8192, bf) == 8
    assert row_chain.slices_for(8192, 2048, bf) == 1
    assert row_chain.slices_for(3072, 1024, bf) == 2  # qwen3-0.6b's gate/up
    assert row_chain.slices_for(64, 64, bf) == 1  # the zoo: a lane's chunk at most
    assert row_chain.slices_for(64, 512, mx.float32) == 4  # 128 chunks: 4 slices of 32
    assert row_chain.fits(bf, 64) and not row_chain.fits(bf, 36)
    assert row_chain.fits(mx.float32, 4) and not row_chain.fits(mx.float32, 6)
