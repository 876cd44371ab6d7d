"""``fast``'s decode step of one row on CUDA through ``row_chain``'s kernels (opt-in:
``BATCHLAB_FAST_CHAIN=1``).

A step of one row is bound by the host (docs/performance.md), and mlx-lm's modules spend
a kernel on each vector op between the products. Here a layer is ``norm_qkv`` (RMS norm,
q/k/v, RoPE), the cache's update, the attention as ``flat_decode`` calls it, then
``residual_product`` (o_proj and the residual), ``norm_swiglu`` (RMS norm, gate/up, silu
times up) and ``residual_product`` again (down_proj and the residual): four kernels
where the modules launch about a dozen. Models whose heads are normalised before RoPE
(qwen3), or whose RoPE the kernel does not reproduce, rotate with the module's RoPE
after ``norm_qkv``. The embedding, the final norm and the head stay the modules'.

The products sum in another order than MLX's, so this is not l1's rounding: ``fast`` on a
GPU is judged by KL against the oracle, and these kernels are held to that gate.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import mlx.core as mx
from mlx import nn

from batchlab.engine.kernels import row_chain
from batchlab.engine.paths import flat_decode

PROJECTIONS = (("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"),
               ("self_attn", "o_proj"), ("mlp", "gate_proj"), ("mlp", "up_proj"),
               ("mlp", "down_proj"))


def unsupported_reason(model: nn.Module) -> str | None:
    """Why the chain cannot run ``model``'s decode (None: it can)."""
    if not flat_decode.supports(model):
        return "not a llama or qwen3 model with full attention on every layer"
    layer = model.model.layers[0]
    dtype = layer.input_layernorm.weight.dtype
    for parent, name in PROJECTIONS:
        linear = getattr(getattr(layer, parent), name)
        if not isinstance(linear, nn.Linear) or "bias" in linear:
            return f"{parent}.{name} is not an unbiased nn.Linear"
        if linear.weight.dtype != dtype:
            return f"{parent}.{name} is {linear.weight.dtype}, the norms {dtype}"
        if not row_chain.fits(dtype, linear.weight.shape[1]):
            return (f"{parent}.{name}'s input ({linear.weight.shape[1]} x {dtype}) is not "
                    "whole 16-byte chunks")
    attn = layer.self_attn
    dim, odd = divmod(attn.q_proj.weight.shape[0], attn.n_heads)
    if odd or dim % 2 or layer.mlp.down_proj.weight.shape[0] % 2:
        return "a head dim or hidden size that is not even"
    return None


@dataclass(frozen=True)
class LayerShape:
    """What ``norm_qkv`` needs of a layer besides its weights."""
    heads: tuple[int, int, int]  # query heads, KV heads, head dim
    input_eps: mx.array
    post_eps: mx.array


class RowChain:
    """One row's decode forward through ``row_chain``, built once per scheduler."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.head_norms = flat_decode.FAMILIES[type(model).__module__]
        self.attention = sys.modules[type(model).__module__].scaled_dot_product_attention
        self.shapes = [self._shape(layer) for layer in model.model.layers]
        rope = model.model.layers[0].self_attn.rope
        # qwen3 normalises each head before RoPE, so the kernel cannot rotate it
        self.inv_freq = None if self.head_norms else row_chain.rope_inverse_frequencies(rope)
        if self.inv_freq is not None and rope.dims != self.shapes[0].heads[2]:
            self.inv_freq = None  # a partial rotation: the module rotates

    @staticmethod
    def _shape(layer: nn.Module) -> LayerShape:
        attn = layer.self_attn
        dim = attn.q_proj.weight.shape[0] // attn.n_heads
        return LayerShape((attn.n_heads, attn.n_kv_heads, dim),
                          row_chain.scalar(layer.input_layernorm.eps),
                          row_chain.scalar(layer.post_attention_layernorm.eps))

    def logits(self, tokens: mx.array, caches: list) -> mx.array:  # not gated: gpu only
        """The logits ``(1, V)`` of one decode step of the row's token ``tokens`` ``(1,)``."""
        inner = self.model.model
        h = inner.embed_tokens(tokens)
        mask = caches[0].make_mask(1)
        for layer, shape, cache in zip(inner.layers, self.shapes, caches, strict=True):
            attn, mlp = layer.self_attn, layer.mlp
            queries, keys, values = row_chain.norm_qkv(
                h, layer.input_layernorm.weight, shape.input_eps, attn.q_proj.weight,
                attn.k_proj.weight, attn.v_proj.weight, shape.heads, cache.offset,
                self.inv_freq)
            if self.inv_freq is None:
                if self.head_norms:
                    queries, keys = attn.q_norm(queries), attn.k_norm(keys)
                queries = attn.rope(queries, offset=cache.offset)
                keys = attn.rope(keys, offset=cache.offset)
            keys, values = cache.update_and_fetch(keys, values)
            out = self.attention(queries, keys, values, cache=cache, scale=attn.scale,
                                 mask=mask)
            h = row_chain.residual_product(h, attn.o_proj.weight, out.reshape(1, -1))
            act = row_chain.norm_swiglu(h, layer.post_attention_layernorm.weight,
                                        shape.post_eps, mlp.gate_proj.weight,
                                        mlp.up_proj.weight)
            h = row_chain.residual_product(h, mlp.down_proj.weight, act)
        h = inner.norm(h)
        if self.model.args.tie_word_embeddings:
            return inner.embed_tokens.as_linear(h)
        return self.model.lm_head(h)
