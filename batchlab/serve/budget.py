"""KV-budget admission: what a row of the served path costs (``engine/core/cost.py``).

A quantized path's caches hold packed 4- or 8-bit keys, so its rows cost what they
really hold; ``RowCost.batch_bytes`` projects a batch left-padded to its longest row, each
row at its prompt plus ``max_tokens``, the most it can grow to.
"""

from __future__ import annotations

from mlx import nn

from batchlab.engine.core.cost import RowCost
from batchlab.engine.core.cost import measure_row_cost as measure_caches
from batchlab.engine.core.scheduler import Scheduler


def measure_row_cost(model: nn.Module, scheduler_class: type[Scheduler] = Scheduler) -> RowCost:
    return measure_caches(model, scheduler_class(model).caches)


__all__ = ["RowCost", "measure_row_cost"]
