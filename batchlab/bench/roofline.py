"""The bandwidth roofline of decode: a step must stream every weight it uses once.

At B=1 a decode step reads each weight matrix once and does ~2 FLOP per weight, far below
any accelerator's compute/bandwidth balance, so ``streamed_bytes / bandwidth`` is a lower
bound on the step time (KV reads, small at short context, are left out: the bound stays a
bound). At larger B the same bound still holds per step, so ``B / bound`` caps aggregate
tok/s until compute takes over.

Streamed bytes are the parameter bytes minus embedding tables that decode only gathers
rows from (an untied input embedding, Gemma's per-layer input tables); a tied table is
also the output head and is read whole.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import mlx.core as mx
from mlx import nn
from mlx.utils import tree_flatten


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightBytes:
    total: int  # every parameter, as stored
    streamed: int  # what one decode step reads


def weight_bytes(model: nn.Module) -> WeightBytes:
    total = sum(p.nbytes for _, p in tree_flatten(model.parameters()))
    head = _head_table(model)
    gathered = 0
    for _, module in model.named_modules():
        if isinstance(module, (nn.Embedding, nn.QuantizedEmbedding)) and module is not head:
            gathered += sum(p.nbytes for _, p in tree_flatten(module.parameters()))
    return WeightBytes(total=total, streamed=total - gathered)


def _head_table(model: nn.Module):
    """The embedding that doubles as the output head, or None when the head is its own."""
    names = dict(model.named_modules())
    if "lm_head" in names:
        return None
    for name in ("model.embed_tokens", "language_model.model.embed_tokens", "embed_tokens",
                 "backbone.embeddings", "transformer.wte"):
        if name in names:
            return names[name]
    return None


def measure_bandwidth(num_bytes: int | None = None, repeats: int = 10) -> float:
    """Device memory bandwidth in bytes/s: the best of ``repeats`` passes of two kernels
    over a large float32 array, ``a + 1`` (reads it and writes a new one: 2x its bytes)
    and ``a.sum()`` (reads it once). The faster kernel sets the bound: a weight-streaming
    decode step only reads.

    1 GiB on a GPU (many times the L2, so this is HBM, not cache); 128 MiB on CPU."""
    if num_bytes is None:
        num_bytes = (1 << 30) if mx.default_device() == mx.gpu else (128 << 20)
    a = mx.random.uniform(shape=(num_bytes // 4,))
    mx.eval(a)
    copy = _best_seconds(lambda: a + 1.0, repeats)
    read = _best_seconds(lambda: a.sum(), repeats)
    return max(2 * a.nbytes / copy, a.nbytes / read)


def _best_seconds(kernel, repeats: int) -> float:
    best = float("inf")
    for i in range(repeats + 2):  # two untimed passes warm the allocator and kernels
        start = time.perf_counter()
        out = kernel()
        mx.eval(out)
        elapsed = time.perf_counter() - start
        del out
        if i >= 2:
            best = min(best, elapsed)
    return best


def bound_seconds(streamed_bytes: int, bandwidth: float) -> float:
    """The shortest possible decode step: every streamed weight read once."""
    return streamed_bytes / bandwidth
