"""KV density per path: the cache bytes one row needs at a context length, and how many
rows fit a fixed KV budget, against the model dtype.

Per attention layer a cached token costs ``H * (Dk + Dv)`` elements; in the model dtype
that is 2 bytes each (bf16), quantized it is the packed words of ``KVQuant.words`` (the
ints plus one scale and one bias per group). A sliding-window layer holds at most its
window. The batch caches also round each row's columns up to steps of 256 and pad rows
to the longest; the table counts the payload of one row, which is what a budget buys.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx import nn

from batchlab.engine.paths.quantized.kv import KVQuant

GIB = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerShape:
    kv_heads: int
    key_dim: int
    value_dim: int
    window: int | None  # sliding-window layers hold at most this many tokens
    dtype_size: int


def layer_shapes(model: nn.Module) -> list[LayerShape]:
    """Shapes of every attention cache, read off one forward of one id."""
    from batchlab.engine.caches.ring import BatchRing
    from batchlab.engine.core.layers import leaves, make_batch_caches

    caches = make_batch_caches(model, 1)
    model(mx.array([[1]]), cache=caches)
    out = []
    for c in leaves(caches):
        if getattr(c, "keys", None) is None or not hasattr(c, "offset_ints"):
            continue
        out.append(LayerShape(kv_heads=c.keys.shape[1], key_dim=c.keys.shape[3],
                              value_dim=c.values.shape[3],
                              window=c.max_size if isinstance(c, BatchRing) else None,
                              dtype_size=c.keys.dtype.size))
    return out


def row_bytes(shapes: list[LayerShape], plan: list[KVQuant] | None, tokens: int) -> int:
    total = 0
    for i, s in enumerate(shapes):
        held = tokens if s.window is None else min(tokens, s.window)
        if plan is None:
            per_token = s.kv_heads * (s.key_dim + s.value_dim) * s.dtype_size
        else:
            q = plan[i]
            per_token = s.kv_heads * 4 * (q.words(s.key_dim, s.dtype_size)
                                          + q.words(s.value_dim, s.dtype_size))
        total += held * per_token
    return total


def density_markdown(model: nn.Module, paths: list[str], tokens: int = 4096,
                     budget: int = GIB) -> str:
    """A Markdown table: per path, KV bytes per row at ``tokens`` and rows per budget."""
    from batchlab.engine.paths.registry import resolve_path

    shapes = layer_shapes(model)
    base = row_bytes(shapes, None, tokens)
    sizes = sorted({s.dtype_size for s in shapes})
    kind = "/".join({2: "16-bit", 4: "float32"}.get(n, f"{n}-byte") for n in sizes)
    lines = [f"KV density at {tokens} tokens per row (payload; budget {budget / GIB:g} GiB; "
             f"the model's KV is {kind}, and so are the quantized scales and biases):",
             "", "| path | KV bytes per row | vs unquantized | rows per budget |",
             "| --- | ---: | ---: | ---: |"]
    for name in dict.fromkeys(paths):
        scheme = resolve_path(name).kv_scheme
        plan = None if scheme is None else scheme.plan(model)
        b = row_bytes(shapes, plan, tokens)
        lines.append(f"| {name} | {b / 2**20:.2f} MiB | {base / b:.2f}x | {budget // b} |")
    return "\n".join(lines)
