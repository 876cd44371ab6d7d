"""Helpers over a model's list of per-layer batch caches.

A model's forward takes one cache per layer (``model(tokens, cache=caches)``); every
membership change touches all of them at once, so row b of the batch is row b of every
layer. The per-layer cache types follow ``model.make_cache()``:

    KVCache                  -> BatchKV
    RotatingKVCache(max_size) -> BatchRing(max_size)    (``keep`` is dropped, as mlx-lm does)
    ArraysCache(size)        -> BatchState(size)
    CacheList(a, b, ...)     -> BatchList(batch(a), batch(b), ...)

Other types (QuantizedKVCache, ChunkedKVCache, ConcatenateKVCache) have no batch form in
mlx-lm either (no ``merge``): ``make_batch_caches`` refuses them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache
from mlx_lm.models.mla import MultiLinear, QuantizedMultiLinear

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.caches.rowints import RowInts, RowUploads
from batchlab.engine.caches.split import split_rows
from batchlab.engine.caches.state import BatchList, BatchState


def single_caches(model) -> list:
    """One row's fresh caches, as mlx-lm's ``make_prompt_cache`` builds them (no
    ``max_kv_size``: BatchGenerator has none)."""
    if hasattr(model, "make_cache"):
        return model.make_cache()
    return [KVCache() for _ in model.layers]


def batch_cache_for(template, left_padding: Sequence[int], kv_class: type = BatchKV,
                    ring_class: type = BatchRing):
    """The empty batch cache that stands for the single-row cache ``template``.
    ``kv_class`` / ``ring_class`` let a path use its own full-attention and sliding-window
    caches (``ring_class(max_size, left_padding)``).

    Types are matched exactly: a subclass (a model's own cache variant) may store or mask
    differently, so it is refused rather than batched as its base class.
    """
    kind = type(template)
    if kind is KVCache:
        return kv_class(left_padding)
    if kind is RotatingKVCache:
        return ring_class(template.max_size, left_padding)
    if kind is ArraysCache:
        return BatchState(len(template.cache), left_padding)
    if kind is CacheList:
        return BatchList(*(batch_cache_for(c, left_padding, kv_class, ring_class)
                           for c in template.caches))
    raise ValueError(  # not gated: refusal
        f"{kind.__name__} has no batch form (mlx-lm cannot batch it either); "
        "run this model at B=1 or give it KVCache/RotatingKVCache/ArraysCache layers"
    )


# Model modules that test ``isinstance(cache, ArraysCache)`` on the forward path: handed a
# BatchState they would silently keep no state (mamba v1 writes its conv/SSM state only
# then). qwen3_next does it too, but only in pipeline-parallel mode, which we never run.
NEEDS_MLX_LM_CLASSES = {"mlx_lm.models.mamba"}


def refuse_unbatchable(model) -> None:
    """Raise for a model whose forward would silently keep no state in the engine's
    caches (``NEEDS_MLX_LM_CLASSES``)."""
    if type(model).__module__ in NEEDS_MLX_LM_CLASSES:  # not gated: refusal
        raise ValueError(
            f"{type(model).__module__} checks isinstance(cache, ArraysCache) and would keep "
            "no state in the engine's caches; it is not supported"
        )


def make_batch_caches(model, batch_size: int, *, kv_class: type = BatchKV,
                      ring_class: type = BatchRing) -> list:
    """Empty batch caches for ``batch_size`` rows: mlx-lm merging that many fresh
    caches, which is what its BatchGenerator does for new prompts (left_padding zero)."""
    refuse_unbatchable(model)
    padding = [0] * batch_size
    caches = [batch_cache_for(c, padding, kv_class, ring_class) for c in single_caches(model)]
    return share_uploads(caches)


def has_rings(model) -> bool:
    """Whether the model has sliding-window (RotatingKVCache) layers."""
    return any(type(c) is RotatingKVCache for c in leaves(single_caches(model)))


def uses_latent_attention(model) -> bool:
    """Whether the model has multi-head latent attention (mlx-lm's ``MultiLinear``:
    deepseek_v3, kimi_linear, glm4_moe_lite, ...): its KV cache holds one latent "head"
    (keys the latent, values the RoPE key part, of other widths), which the model also
    reads outside attention (``q_pe @ k_pe^T``, added through the mask)."""
    return any(isinstance(m, (MultiLinear, QuantizedMultiLinear))
               for _, m in model.named_modules())


# Modules that read the position offset as one Python number: dynamic NTK RoPE
# (``max(L + offset, n)``, ``if seq_len > n``: the base grown from the sequence length) and
# gpt_bigcode's learned positions (``np.arange(offset, offset + L)``). A batch's per-row
# offsets (a (B,) array) make them raise at B > 1, in mlx-lm's batch mode too (ORACLE-BUG
# cells ``l1/llama-dynamic/B3/*``, ``l1/gpt-bigcode/B3/*``), and inside ``mx.compile``.
SCALAR_OFFSET_READERS = frozenset({
    "mlx_lm.models.rope_utils.DynamicNTKScalingRoPE",
    "mlx_lm.models.internlm3.DynamicNTKScalingRoPE",
    "mlx_lm.models.gpt_bigcode.GPTBigCodeModel",
})


# Modules that place their queries by the width of the keys they are handed: afm7's
# KV-reuse attention rotates them at ``S - L``. In a padded batch S is the batch's width,
# so mlx-lm's batch mode misplaces every shorter row (ORACLE-BUG, ``l1/afm7/B3/*``).
KEY_WIDTH_READERS = frozenset({"mlx_lm.models.afm7.KVReuseAttention"})


def _first_module(model, names: frozenset[str]) -> str | None:
    for _, m in model.named_modules():
        if f"{type(m).__module__}.{type(m).__name__}" in names:
            return type(m).__name__
    return None


def scalar_offset_reader(model) -> str | None:
    """The class name of a module in ``model`` that needs the offset as a Python number
    (``SCALAR_OFFSET_READERS``), or None."""
    return _first_module(model, SCALAR_OFFSET_READERS)


def key_width_reader(model) -> str | None:
    """The class name of a module in ``model`` that reads its keys' width as the
    position (``KEY_WIDTH_READERS``), or None."""
    return _first_module(model, KEY_WIDTH_READERS)


def leaves(caches: Sequence) -> Iterator:
    """Every cache of a layer list, a ``CacheList``'s or ``BatchList``'s parts in place
    of the list (the one walker over them)."""
    for c in caches:
        if isinstance(c, (BatchList, CacheList)):
            yield from leaves(c.caches)
        else:
            yield c


def share_uploads(caches: list) -> list:
    """Give the layers of one batch one ``RowUploads`` per cache class and vector, so a
    step uploads each vector once, not once per layer (``rowints.py``). Returns ``caches``."""
    shared: dict[tuple[type, str], RowUploads] = {}
    for c in leaves(caches):
        for name, ints in vars(c).items():
            if isinstance(ints, RowInts):
                ints.uploads = shared.setdefault((type(c), name), RowUploads())
    return caches


def merge_rows(rows: Sequence, kv_class: type = BatchKV):
    """One layer's batch cache from that layer's single-row caches (mlx-lm's classes,
    as ``extract`` returns them), one per row; full attention as ``kv_class``."""
    kind = type(rows[0])
    if kind is KVCache:
        return kv_class.merge(rows)
    if kind is RotatingKVCache:
        return BatchRing.merge(rows)
    if kind is ArraysCache:
        return BatchState.merge(rows)
    if kind is CacheList:  # part i of the batch list merges part i of every row
        return BatchList(*(merge_rows(list(parts), kv_class)
                           for parts in zip(*(c.caches for c in rows))))
    raise ValueError(  # not gated: refusal
        f"{kind.__name__} does not support batching with history (no merge)")


def merge_layers(per_row: Sequence[Sequence], kv_class: type = BatchKV) -> list:
    """Batch caches from each row's list of per-layer single caches (row order kept)."""
    return share_uploads([merge_rows(list(layer), kv_class) for layer in zip(*per_row)])


def filter_layers(caches: list, keep: Sequence[int]) -> list:
    """Keep rows ``keep`` in every layer (in place); returns ``caches``."""
    for c in caches:
        c.filter(keep)
    return caches


def split_layers(caches: list, take: Sequence[int]) -> list:
    """Rows ``take`` of every layer as new caches (``caches`` unchanged)."""
    return share_uploads([split_rows(c, list(take)) for c in caches])


def extend_layers(caches: list, other: list) -> list:
    """Append ``other``'s rows to every layer of ``caches`` (in place). The scheduler
    replaces an empty batch instead of extending it, so both sides have rows."""
    for c, o in zip(caches, other):
        c.extend(o)
    return caches


def extract_layers(caches: list, idx: int) -> list:
    """Row ``idx`` of every layer, as mlx-lm single-row caches."""
    return [c.extract(idx) for c in caches]


def prepare_layers(caches: list, *, lengths, right_padding) -> None:
    for c in caches:
        c.prepare(lengths=lengths, right_padding=right_padding)


def finalize_layers(caches: list) -> None:
    for c in caches:
        c.finalize()


def layer_state(caches: Sequence) -> list[mx.array]:
    """Every array the caches hold, for ``mx.eval`` after a forward."""
    out = []
    for c in leaves(caches):
        for x in c.state:
            if isinstance(x, mx.array):
                out.append(x)
            elif isinstance(x, list):  # BatchState's arrays
                out += [a for a in x if a is not None]
    return out
