"""Seeded bugs in ``fast``'s decode forward on flat hidden states
(``batchlab/engine/paths/flat_decode.py``)."""

from __future__ import annotations

from batchlab.engine.paths import flat_decode
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
