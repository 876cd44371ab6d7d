"""Seeded bugs on the model side: patches of mlx-lm model classes.

The zoo memoises loaded models (``batchlab.zoo.load``), so these patch the CLASS (the
instances stay the same objects) and ``inject.applied`` restores it. A model instance's
own attributes (gemma4's ``previous_kvs``) are swapped only for the length of one call.
"""

from __future__ import annotations

from mlx_lm.models import gemma4_text, llama

from batchlab.selftest.inject import Patch, original, wrapped


def rope_after_write() -> list[Patch]:
    """Queries roped with ``cache.offset`` read AFTER ``update_and_fetch`` (keys before
    it): every query sits N positions ahead of its key. mlx-lm 0.32.2's llama
    ``Attention.__call__`` with the query rope moved below the write."""

    def call(self, x, mask=None, cache=None):
        B, L, _ = x.shape
        queries, keys, values = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        queries = queries.reshape(B, L, self.n_heads, -1).transpose(0, 2, 1, 3)
        keys = keys.reshape(B, L, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
        values = values.reshape(B, L, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
        if cache is not None:
            keys = self.rope(keys, offset=cache.offset)
            keys, values = cache.update_and_fetch(keys, values)
            queries = self.rope(queries, offset=cache.offset)  # the bug: read after the write
        else:
            queries, keys = self.rope(queries), self.rope(keys)
        out = llama.scaled_dot_product_attention(
            queries, keys, values, cache=cache, scale=self.scale, mask=mask
        )
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1))

    return [Patch(owner=llama.Attention, name="__call__", value=call)]


def per_layer_inputs_batch1() -> list[Patch]:
    """gemma4's per-layer input embeddings built for batch 1 (mlx-bun's
    ``computePerLayerInputs`` hardcoded ``[1, L, ...]``): row 0's ids are embedded as a
    (1, L, layers, d) tensor, which then broadcasts silently over every row."""

    def make(clean):
        def buggy(self, input_ids, input_embeddings=None):
            if input_ids is not None:
                input_ids = input_ids[:1]
            return clean(self, input_ids, input_embeddings)
        return buggy

    return [wrapped(gemma4_text.Gemma4TextModel, "_get_per_layer_inputs", make)]


def kv_shared_wrong_layer() -> list[Patch]:
    """KV-shared layers read the LAST cache-owning layer's K/V instead of the last one of
    their own type (sliding vs full): gemma4-e4b's layer 2 (sliding) gets layer 1's
    full-attention K/V."""
    Model = gemma4_text.Gemma4TextModel
    clean = original(Model, "__call__")

    def call(self, *args, **kwargs):
        n = len(self.layers)
        owners = n - self.config.num_kv_shared_layers
        if not 0 < owners < n:
            return clean(self, *args, **kwargs)
        right = self.previous_kvs
        self.previous_kvs = right[:owners] + [owners - 1] * (n - owners)
        try:
            return clean(self, *args, **kwargs)
        finally:
            self.previous_kvs = right

    return [Patch(owner=Model, name="__call__", value=call)]

