"""Where a model's attention call goes: mlx-lm's helper, or one of the engine's own.

mlx-lm's models call ``scaled_dot_product_attention`` from ``mlx_lm.models.base``, which
picks the quantized or the fused kernel by ``hasattr(cache, "bits")``. Two paths need
another computation than that helper's on some backends:

- the invariant path's decode attention over exactly each row's keys, for caches that
  ``attends_rows`` (``row_attention.py``), and its prefill attention over each row's own
  keys, for caches that ``prefills_rows`` (``row_prefill.py``: many prompts in one
  forward, each with the bits of its prefill alone);
- quantized KV on CUDA, where mlx-lm's quantized attention has no kernel (its
  ``quantized_matmul`` calls are refused there: ``quantized_attention.py``, whose decode
  kernel reads the owner cache's packed words), for the engine's caches that
  ``attends_packed`` only: mlx-lm's own QuantizedKVCache, which the serial oracle runs in
  the same process, keeps mlx-lm's helper;
- the fast path's decode on CUDA, for caches that ``groups_decode``: one read of each KV
  head for its query group (``grouped_decode.py``: its own float order by default, MLX's
  bits with ``BATCHLAB_GQA_TILED=0``) where MLX's fused kernel
  reads it once per query head, and from 256 keys in place of MLX's cuDNN decode, which
  does not repeat itself; calls the kernel does not take go to mlx-lm's helper.

``install_dispatch`` replaces the helper in the loaded ``mlx_lm.models`` modules with
``dispatch``, which sends those calls to the engine and every other call, unchanged, to
mlx-lm's helper; it is installed only by the paths that need it, when they are built.
KV-shared layers (gemma4) get no cache: their keys are the ones a caching layer was just
served, so the dispatch finds that layer's cache by the keys array it handed out.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

import mlx.core as mx

from batchlab.backend import on_cuda
from batchlab.engine.kernels import grouped_decode
from batchlab.engine.kernels.quantized_attention import quantized_attention
from batchlab.engine.kernels.row_attention import row_attention
from batchlab.engine.kernels.row_prefill import row_prefill_attention

# id(keys) -> (keys, the cache that served them), newest last. Bounded: a KV-shared layer
# reads keys served earlier in the same forward, so only the last forward's entries (one
# per caching layer) matter, and caches that are gone must not keep their keys alive.
_SERVED: OrderedDict[int, tuple[mx.array, object]] = OrderedDict()
_SERVED_MAX = 512


def _cache_of(keys, cache):
    if cache is not None:
        return cache
    served = _SERVED.get(id(keys))  # a KV-shared layer: keys a caching layer was served
    return served[1] if served is not None and served[0] is keys else None


def _remember(keys, cache) -> None:
    old = getattr(cache, "_served_id", None)
    if old is not None:
        _SERVED.pop(old, None)
    _SERVED[id(keys)] = (keys, cache)
    cache._served_id = id(keys)
    while len(_SERVED) > _SERVED_MAX:
        _SERVED.popitem(last=False)


def additive_scores(mask) -> mx.array | None:
    """The scores a model adds through the mask (a floating-point mask array: MLA's
    ``where(mask, q_pe @ k_pe^T, min)``, its decoupled key part), or None for a boolean
    mask, which only marks padding and causality: the row kernels skip those by
    construction. Dropping the scores changed kimi-linear's token 0 by 0.56 in logprob."""
    if isinstance(mask, mx.array) and mx.issubdtype(mask.dtype, mx.floating):
        return mask
    return None


def make_dispatch(original):
    def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None):
        owner = _cache_of(keys, cache)
        if queries.shape[2] == 1 and getattr(owner, "attends_rows", False):
            if cache is not None:
                _remember(keys, cache)
            return row_attention(queries, keys, values, owner.first_keys(), scale, sinks,
                                 scores=additive_scores(mask))
        if queries.shape[2] > 1 and getattr(owner, "prefills_rows", False):
            if cache is not None:
                _remember(keys, cache)
            first, ends, counts = owner.prefill_spans(queries.shape[2])
            return row_prefill_attention(queries, keys, values, first, ends, counts, scale,
                                         sinks, scores=additive_scores(mask))
        if (on_cuda() and queries.shape[2] == 1  # not gated: gpu only
                and getattr(owner, "groups_decode", False)
                and grouped_decode.fits(queries, keys, values, mask, sinks)
                and grouped_decode.takes(queries.shape[0], keys.shape[1], keys.shape[2])):
            return grouped_decode.grouped_decode_attention(queries, keys, values, scale)
        if (getattr(owner, "attends_packed", False) and hasattr(owner, "bits")
                and on_cuda()):  # not gated: gpu only
            return quantized_attention(queries, keys, values, scale, mask, owner.group_size,
                                       owner.bits, sinks, owner)
        return original(queries, keys, values, cache=cache, scale=scale, mask=mask,
                        sinks=sinks)

    scaled_dot_product_attention.original = original
    return scaled_dot_product_attention


def install_dispatch() -> None:
    """Route mlx-lm's attention helper through ``dispatch`` in every loaded model module
    (idempotent; calls on other caches run mlx-lm's helper unchanged)."""
    from mlx_lm.models import base

    original = getattr(base.scaled_dot_product_attention, "original",
                       base.scaled_dot_product_attention)
    dispatch = None
    for name, module in list(sys.modules.items()):
        if not name.startswith("mlx_lm.models.") or module is None:
            continue
        if getattr(module, "scaled_dot_product_attention", None) is original:
            dispatch = dispatch or make_dispatch(original)
            module.scaled_dot_product_attention = dispatch
