"""KV-budget admission: how many bytes a batch of rows will hold, before it holds them.

The cost of one row is measured once per model and path, by running three tokens
through one row of the path's own batch caches (``Scheduler._fresh_caches``: a quantized
path's caches hold packed 4- or 8-bit keys, so its tokens cost what they really hold):
each layer's cache then says what a token costs it. Three kinds of layer:

- full attention: ``per_token`` bytes for every token the row will ever hold;
- sliding window: the same, but never more than the window (``window_tokens``);
- state (SSM, conv): a fixed size per row, whatever its length.

The engine's batch caches are left-padded to the longest row, so a batch costs
``rows x (longest row)``, not the sum of its rows: ``batch_bytes`` projects that, with
each row at its prompt plus ``max_tokens``, the most it can grow to.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx import nn

from batchlab.engine.core.layers import leaves
from batchlab.engine.core.scheduler import Scheduler


@dataclass(frozen=True, slots=True, kw_only=True)
class RowCost:
    per_token: int  # bytes per token, full-attention layers
    window_per_token: tuple[tuple[int, int], ...]  # (window, bytes per token) per ring layer
    fixed: int  # bytes per row whatever its length (state layers)

    def row_bytes(self, tokens: int) -> int:
        ring = sum(min(window, tokens) * cost for window, cost in self.window_per_token)
        return self.fixed + self.per_token * tokens + ring

    def batch_bytes(self, lengths: list[int]) -> int:
        """The KV bytes of a batch whose rows reach ``lengths`` tokens (left-padded)."""
        if not lengths:
            return 0
        return len(lengths) * self.row_bytes(max(lengths))


def measure_row_cost(model: nn.Module, scheduler_class: type[Scheduler] = Scheduler) -> RowCost:
    caches = scheduler_class(model)._fresh_caches(1)
    # a prefill, then a decode step: a quantized path switches format after its first
    # forward, and a ring's decode buffer is what it keeps
    mx.eval(model(mx.array([[0, 0]]), cache=caches))
    mx.eval(model(mx.array([[0]]), cache=caches))
    per_token, rings, fixed = 0, [], 0
    for cache in leaves(caches):
        if hasattr(cache, "keys"):  # BatchKV, BatchRing and their quantized forms
            if cache.keys is None:  # a layer that reads another layer's KV (shared KV)
                continue
            cost = (cache.keys.nbytes + cache.values.nbytes) // cache.keys.shape[2]
            if hasattr(cache, "max_size"):
                rings.append((cache.max_size, cost))
            else:
                per_token += cost
        else:  # state arrays (BatchState.cache): as large at one token as at any length
            fixed += sum(a.nbytes for a in cache.cache if a is not None)
    return RowCost(per_token=per_token, window_per_token=tuple(rings), fixed=fixed)

