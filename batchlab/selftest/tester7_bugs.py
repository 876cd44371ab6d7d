"""Seeded bugs of the outside tester's seventh round (reports/gate/outside-tester-r7/):
the three bugs of its 22 non-equivalent ones that every default cell passed.

Two sit where prompt-cache history meets a quantized scheme other than kv8 / kv4 at
group 64: the history cells ran those two alone, where every layer is quantized alike,
so a merge that quantized every layer like the first (kvmix quantizes layers otherwise)
or without the scheme's group size (kv8-g32, kv4-g32) passed. The third: no invariant
cell had logits processors, and a row's solo run drops them alike, so only the second
judge sees a processed forward that calls the unprocessed one.

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog (``catalog_rounds.py`` names the cells that catch it). They wrap the engine's
own code, so they keep tracking it as it changes.
"""

from __future__ import annotations

import dataclasses

from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.invariant import path as invariant
from batchlab.engine.paths.quantized.caches import QuantizedCaches
from batchlab.engine.paths.quantized.kv import KVQuant
from batchlab.selftest.inject import Patch, wrapped


def _merged_with(replan) -> list[Patch]:
    """``QuantizedCaches.merged`` run with its plan replaced by ``replan(plan)``."""

    def make(clean):
        def merged(self, model, per_row):
            return clean(dataclasses.replace(self, plan=replan(self.plan)), model, per_row)

        return merged

    return [wrapped(QuantizedCaches, "merged", make)]


def history_merged_like_first_layer() -> list[Patch]:
    """History rows merged into a quantized batch with the first layer's quantization
    for every layer: kvmix quantizes its layers at other bits, so a later layer's history
    is packed at the wrong width (a crash at the join)."""
    return _merged_with(lambda plan: (plan[0],) * len(plan))


def history_merged_at_default_group() -> list[Patch]:
    """History rows merged into a quantized batch with each layer's quantization rebuilt
    from its bits and start alone: the group size falls back to 64, so a group-32
    scheme's history rows are packed at group 64 (a crash at the join)."""
    return _merged_with(lambda plan: tuple(KVQuant(bits=q.bits, start=q.start) for q in plan))


def invariant_processors_dropped() -> list[Patch]:
    """The invariant path's processed decode forward calls the unprocessed one: a row's
    solo run drops its processors alike, so the solo gate passes; the second judge sees
    the greedy rows leave the batch oracle's bits."""

    def make(clean):
        def processed(self, inputs, caches, seqs):
            with invariant.decoding_by_rows():
                return Scheduler._forward_logprobs(self, inputs, caches)

        return processed

    return [wrapped(invariant.InvariantScheduler, "_processed_logprobs", make)]
