"""``fast``'s decode forward for llama and qwen3 models: the hidden state kept flat.

At a decode step (one token a row) mlx-lm's modules carry the hidden state as
``(B, 1, D)``: every projection's matmul flattens and unflattens it, the heads go
through a reshape and a transpose each, and the logits are sliced at the last position.
With one token a row the same values are ``(B, D)``, and a projection's output reshaped
to ``(B, H, 1, Dh)`` is the heads as the attention takes them (a transpose that moves an
axis of length 1 moves nothing). This forward calls the model's own modules on those
shapes: the same projections (``nn.Linear`` on a 2-D input is one matmul), norms, RoPE at
the cache's offsets, the cache's update and mask, and the attention helper as the
model's module has it (``attention_dispatch`` may have replaced it); only the nodes that
reshape, transpose, flatten and unflatten go. A decode step of a small model is bound
by the host, which builds and encodes every node (docs/performance.md, "Ops per decode
submit").

Every kernel reads the same values in the same order, so the logits are the modules'
bit for bit: the default matrix's ``fast`` cells on the zoo's llama and qwen3 models
compare them with the oracle's (``test_flat_decode.py`` with the modules' own forward).
Other models, and llama models with sliding-window layers, keep the modules' forward
(``supports``).

A step of one row whose q/k/v product is one GEMM (``fused_projections``) also rotates
its queries and keys with one RoPE call over the product's q|k columns, where the
modules make two: RoPE rotates every head alone at the row's offset, so the heads are
the same bits in one call or two, and with one row the slices the attention and the
cache get are contiguous. qwen3 normalises queries and keys with their own weights
first, so it keeps two.
"""

from __future__ import annotations

import sys

import mlx.core as mx
from mlx import nn

from batchlab.engine.paths.fast import fused_projections

# mlx-lm's model modules whose decode this forward reproduces, and whether their
# attention normalises each head's queries and keys (qwen3's q_norm / k_norm)
FAMILIES = {"mlx_lm.models.llama": False, "mlx_lm.models.qwen3": True}


def supports(model: nn.Module) -> bool:
    """Whether ``flat_logits`` reproduces ``model``'s decode forward: one of ``FAMILIES``'s
    ``Model`` classes, every layer full attention."""
    module = type(model).__module__
    if module not in FAMILIES or type(model).__name__ != "Model":
        return False
    return getattr(model.model, "swa_idx", None) is None


def flat_logits(model: nn.Module, tokens: mx.array, caches: list) -> mx.array:
    """The logits ``(B, V)`` of one decode step of the rows' ``tokens`` ``(B,)``: the
    modules' ``model(tokens[:, None], cache=caches)[:, -1, :]`` with flat hidden states."""
    inner = model.model
    attention = sys.modules[type(model).__module__].scaled_dot_product_attention
    head_norms = FAMILIES[type(model).__module__]
    h = inner.embed_tokens(tokens)
    mask = caches[0].make_mask(1)  # create_attention_mask's call for one new token
    for layer, cache in zip(inner.layers, caches, strict=True):
        r = _attention(layer.self_attn, layer.input_layernorm(h), mask, cache, attention,
                       head_norms)
        h = h + r
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return output_head(model)(inner.norm(h))


def output_head(model: nn.Module):
    """The model's logits layer: the tied embedding's ``as_linear``, or ``lm_head``."""
    if model.args.tie_word_embeddings:
        return model.model.embed_tokens.as_linear
    return model.lm_head


def _attention(attn: nn.Module, x: mx.array, mask, cache, attention,
               head_norms: bool) -> mx.array:
    rows = x.shape[0]
    q_and_k = None if head_norms or rows > 1 else fused_projections.columns(attn.q_proj, x, 0, 1)
    if q_and_k is not None:
        heads = q_and_k.reshape(rows, attn.n_heads + attn.n_kv_heads, 1, -1)
        heads = attn.rope(heads, offset=cache.offset)
        queries, keys = heads[:, :attn.n_heads], heads[:, attn.n_heads:]
    else:
        queries = attn.q_proj(x).reshape(rows, attn.n_heads, 1, -1)
        keys = attn.k_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
        if head_norms:
            queries, keys = attn.q_norm(queries), attn.k_norm(keys)
        queries = attn.rope(queries, offset=cache.offset)
        keys = attn.rope(keys, offset=cache.offset)
    values = attn.v_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
    keys, values = cache.update_and_fetch(keys, values)
    output = attention(queries, keys, values, cache=cache, scale=attn.scale, mask=mask)
    return attn.o_proj(output.reshape(rows, -1))
