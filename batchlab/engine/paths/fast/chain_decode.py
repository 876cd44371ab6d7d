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
from batchlab.engine.kernels.decode_streams import scale_array
from batchlab.engine.paths.fast import flat_decode

PROJECTIONS = (("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"),
               ("self_attn", "o_proj"), ("mlp", "gate_proj"), ("mlp", "up_proj"),
               ("mlp", "down_proj"))


def unsupported_reason(model: nn.Module) -> str | None:  # not gated: gpu only
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
    hidden = layer.self_attn.q_proj.weight.shape[1]
    if not row_chain.stages(dtype, hidden):
        return (f"a hidden size of {hidden} x {dtype} does not fit "
                f"{row_chain.MAX_STAGED_BYTES} bytes of shared memory")
    attn = layer.self_attn
    dim, odd = divmod(attn.q_proj.weight.shape[0], attn.n_heads)
    if odd or dim % 2 or layer.mlp.down_proj.weight.shape[0] % 2:
        return "a head dim or hidden size that is not even"
    return None


@dataclass(frozen=True)
class ChainLayer:
    """What a layer's step reads, looked up once (a module attribute costs a dict walk, and
    a step of a 16-layer model reads ~20 a layer)."""
    attn: nn.Module  # its RoPE, q / k norms and scale
    heads: tuple[int, int, int]  # query heads, KV heads, head dim
    input_norm: mx.array
    input_eps: mx.array
    wq: mx.array
    wk: mx.array
    wv: mx.array
    wo: mx.array
    post_norm: mx.array
    post_eps: mx.array
    w_gate: mx.array
    w_up: mx.array
    w_down: mx.array

    @classmethod
    def of(cls, layer: nn.Module) -> ChainLayer:  # not gated: gpu only
        attn, mlp = layer.self_attn, layer.mlp
        dim = attn.q_proj.weight.shape[0] // attn.n_heads
        return cls(attn, (attn.n_heads, attn.n_kv_heads, dim), layer.input_layernorm.weight,
                   scale_array(layer.input_layernorm.eps), attn.q_proj.weight,
                   attn.k_proj.weight, attn.v_proj.weight, attn.o_proj.weight,
                   layer.post_attention_layernorm.weight,
                   scale_array(layer.post_attention_layernorm.eps),
                   mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)


class RowChain:
    """One row's decode forward through ``row_chain``, built once per scheduler (it keeps
    the weights it was built with: a model updated later needs a new scheduler)."""

    def __init__(self, model: nn.Module):  # not gated: gpu only
        self.model = model
        self.head_norms = flat_decode.FAMILIES[type(model).__module__]
        self.family = sys.modules[type(model).__module__]
        self.layers = [ChainLayer.of(layer) for layer in model.model.layers]
        self.embed = model.model.embed_tokens
        self.norm = model.model.norm
        self.head = flat_decode.output_head(model)
        rope = self.layers[0].attn.rope
        # qwen3 normalises each head before RoPE, so the kernel cannot rotate it
        self.inv_freq = None if self.head_norms else row_chain.rope_inverse_frequencies(rope)
        if self.inv_freq is not None and rope.dims != self.layers[0].heads[2]:
            self.inv_freq = None  # a partial rotation: the module rotates

    def logits(self, tokens: mx.array, caches: list) -> mx.array:  # not gated: gpu only
        """The logits ``(1, V)`` of one decode step of the row's token ``tokens`` ``(1,)``."""
        h = self.embed(tokens)
        mask = caches[0].make_mask(1)
        # looked up each step, as flat_decode does: attention_dispatch may replace it
        attention = self.family.scaled_dot_product_attention
        # every layer holds the same tokens, so the same offset: one rotation a step
        rotate = (None if self.inv_freq is None
                  else row_chain.rotation(caches[0].offset, self.inv_freq))
        for lay, cache in zip(self.layers, caches, strict=True):
            queries, keys, values = row_chain.norm_qkv(
                h, lay.input_norm, lay.input_eps, lay.wq, lay.wk, lay.wv, lay.heads, rotate)
            if rotate is None:  # the module rotates (qwen3's head norms come first)
                attn, offset = lay.attn, cache.offset
                if self.head_norms:
                    queries, keys = attn.q_norm(queries), attn.k_norm(keys)
                queries = attn.rope(queries, offset=offset)
                keys = attn.rope(keys, offset=offset)
            keys, values = cache.update_and_fetch(keys, values)
            out = attention(queries, keys, values, cache=cache, scale=lay.attn.scale, mask=mask)
            h = row_chain.residual_product(h, lay.wo, out.reshape(1, -1))
            act = row_chain.norm_swiglu(h, lay.post_norm, lay.post_eps, lay.w_gate, lay.w_up)
            h = row_chain.residual_product(h, lay.w_down, act)
        return self.head(self.norm(h))
