"""Seeded bugs in ``fast``'s decode forward on flat hidden states
(``batchlab/engine/paths/fast/flat_decode.py``) and its fused projections
(``batchlab/engine/paths/fast/fused_projections.py``)."""

from __future__ import annotations

from batchlab.engine.paths.fast import flat_decode, fused_projections
from batchlab.selftest.inject import Patch, wrapped


def flat_skips_k_norm() -> list[Patch]:
    """The flat forward normalises each head's queries (qwen3's ``q_norm``) and not its
    keys: the two lines of the modules' attention folded into one, half of it lost."""

    def attention(attn, x, mask, cache, sdpa, head_norms):
        rows = x.shape[0]
        queries = attn.q_proj(x).reshape(rows, attn.n_heads, 1, -1)
        keys = attn.k_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
        values = attn.v_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
        if head_norms:
            queries = attn.q_norm(queries)  # the bug: keys are not normalised
        queries = attn.rope(queries, offset=cache.offset)
        keys = attn.rope(keys, offset=cache.offset)
        keys, values = cache.update_and_fetch(keys, values)
        output = sdpa(queries, keys, values, cache=cache, scale=attn.scale, mask=mask)
        return attn.o_proj(output.reshape(rows, -1))

    return [Patch(owner=flat_decode, name="_attention", value=attention)]


def flat_drops_mask() -> list[Patch]:
    """The flat forward attends with no mask ("a decode step sees every key"): a
    left-padded row's padding keys join its softmax."""

    def make(clean):
        def attention(attn, x, mask, cache, sdpa, head_norms):
            return clean(attn, x, None, cache, sdpa, head_norms)
        return attention

    return [wrapped(flat_decode, "_attention", make)]


def one_row_keys_unrotated() -> list[Patch]:
    """The one-row step's single RoPE call rotates the q|k columns, and the keys are then
    sliced from the product it was given instead of from its output."""

    def make(clean):
        def attention(attn, x, mask, cache, sdpa, head_norms):
            rows = x.shape[0]
            q_and_k = None if head_norms or rows > 1 else fused_projections.columns(
                attn.q_proj, x, 0, 1)
            if q_and_k is None:
                return clean(attn, x, mask, cache, sdpa, head_norms)
            heads = q_and_k.reshape(rows, attn.n_heads + attn.n_kv_heads, 1, -1)
            queries = attn.rope(heads, offset=cache.offset)[:, :attn.n_heads]
            keys = heads[:, attn.n_heads:]  # the bug: the keys before their rotation
            values = attn.v_proj(x).reshape(rows, attn.n_kv_heads, 1, -1)
            keys, values = cache.update_and_fetch(keys, values)
            output = sdpa(queries, keys, values, cache=cache, scale=attn.scale, mask=mask)
            return attn.o_proj(output.reshape(rows, -1))
        return attention

    return [wrapped(flat_decode, "_attention", make)]


def fused_product_memo_by_shape() -> list[Patch]:
    """A fused group remembers its last product by the input's shape, not the input
    itself: at one row every layer's input has the same shape, so every layer after
    the first reads the first layer's projections."""

    def product(self, x):
        if self.last_x is None or self.last_x.shape != x.shape:
            self.last_x, self.last_product = x, x @ self.weight.T
            self.last_parts = [self.last_product[..., a:b] for a, b in self.ranges]
        return self.last_product

    return [Patch(owner=fused_projections._Group, name="product", value=product)]
