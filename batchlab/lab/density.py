"""KV density per path: the cache bytes one row needs at a context length, and how many
rows fit a fixed KV budget, against the model dtype.

The bytes are what the path's own caches hold per token (``engine/core/cost.py``, the
accounting ``serve --kv-budget`` admits by): ``H * (Dk + Dv)`` elements per attention
layer in the model dtype, or the packed words of the quantized layout when quantized (the
ints plus one scale and one bias per group); a sliding-window layer holds at most its
window. The batch caches also round each row's columns up to steps of 256 and pad rows
to the longest; the table counts the payload of one row, which is what a budget buys.
"""

from __future__ import annotations

import mlx.core as mx
from mlx import nn

GIB = 1 << 30


def density_markdown(model: nn.Module, paths: list[str], tokens: int = 4096,
                     budget: int = GIB) -> str:
    """A Markdown table: per path, KV bytes per row at ``tokens`` and rows per budget."""
    from batchlab.engine.core.cost import measure_row_cost
    from batchlab.engine.paths.registry import resolve_path

    def row_bytes(path: str) -> int:
        caches = resolve_path(path).scheduler(model).caches
        return measure_row_cost(model, caches).row_bytes(tokens)

    base = row_bytes("l1")
    sizes = sorted(kv_dtype_sizes(model))
    kind = "/".join({2: "16-bit", 4: "float32"}.get(n, f"{n}-byte") for n in sizes)
    lines = [f"KV density at {tokens} tokens per row (payload; budget {budget / GIB:g} GiB; "
             f"the model's KV is {kind}, and so are the quantized scales and biases):",
             "", "| path | KV bytes per row | vs unquantized | rows per budget |",
             "| --- | ---: | ---: | ---: |"]
    for name in dict.fromkeys(paths):
        b = row_bytes(name)
        lines.append(f"| {name} | {b / 2**20:.2f} MiB | {base / b:.2f}x | {budget // b} |")
    return "\n".join(lines)


def kv_dtype_sizes(model: nn.Module) -> set[int]:
    """Bytes per element of the model's keys, read off one forward of one id."""
    from batchlab.engine.core.layers import leaves, make_batch_caches

    caches = make_batch_caches(model, 1)
    model(mx.array([[1]]), cache=caches)
    return {c.keys.dtype.size for c in leaves(caches) if getattr(c, "keys", None) is not None}
