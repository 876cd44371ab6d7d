"""Seeded bugs for the zoo's models whose attention reads what batching changes (zoo3).

afm7's KV-reuse layer rotates its queries at ``S - L``, S the width of the keys the
previous layer's cache hands it. Every other zoo model is blind to that width on the
CPU: extra left-padding columns are masked, and MLX's fused attention gives the same
bits with masked keys prepended (FACTS.md). So a cache that hands the model wider keys
than mlx-lm's (here: ``filter`` no longer trims the padding every kept row shares)
passes every other cell, and afm7's, where the engine must reproduce mlx-lm's batch bits
(ORACLE-BUG cells: wrong, but the engine's gate is to equal them), fail.
"""

from __future__ import annotations

from batchlab.engine.caches import kv
from batchlab.selftest.inject import Patch


def filter_keeps_shared_padding() -> list[Patch]:
    """``BatchKV.filter`` keeps the rows but not mlx-lm's trim of the left padding every
    kept row shares (an engine that never narrows its buffer): masked, so invisible to
    every model but afm7, whose KV-reuse queries then sit at the wider width."""

    def filter(self, indices) -> None:
        rows = kv.take_rows(self, indices)
        if self._right_padding is not None:
            self._right_padding = self._right_padding[rows]

    return [Patch(owner=kv.BatchKV, name="filter", value=filter)]
