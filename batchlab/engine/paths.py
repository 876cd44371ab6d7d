"""The engine's paths: how a cell runs, and how its result is gated against the oracle.

    l1    batchlab's own primitives on mlx-lm's schedule and layouts; bit-exact, always
    fast      l1 without all-True full-attention decode masks; bit-exact where exact, else KL
    compiled  l1 with the decode forward traced by mx.compile (full-attention models); KL

Tolerances live here, on the path, and nowhere else. l1 has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlx import nn

from batchlab.engine.compiled import CompiledScheduler, unsupported_reason
from batchlab.engine.fast import FastScheduler
from batchlab.engine.scheduler import Scheduler


@dataclass(frozen=True, slots=True, kw_only=True)
class KLGate:
    """Pass a non-exact lab cell when its statistics against the oracle stay inside."""

    max_kl: float  # nats, worst single step of any row
    min_same_top1: float  # share of compared steps whose argmax agrees


@dataclass(frozen=True, slots=True, kw_only=True)
class EnginePath:
    name: str
    scheduler: type[Scheduler]
    description: str
    kl_gate: KLGate | None  # None: bit-exact or FAIL
    refuses: Callable[[nn.Module], str | None] = lambda model: None  # why not this model


# The one tolerance of the lab paths (fast, compiled) where they are not bit-exact.
LAB_KL_GATE = KLGate(max_kl=1e-3, min_same_top1=0.99)

PATHS = {
    "l1": EnginePath(name="l1", scheduler=Scheduler, kl_gate=None,
                     description="mlx-lm's schedule and layouts, gated bit-exact"),
    "fast": EnginePath(name="fast", scheduler=FastScheduler,
                       kl_gate=LAB_KL_GATE,
                       description="l1 without all-True full-attention decode masks (fused kernels)"),
    "compiled": EnginePath(name="compiled", scheduler=CompiledScheduler,
                           kl_gate=LAB_KL_GATE,
                           refuses=unsupported_reason,
                           description="l1 with a traced decode forward (mx.compile), "
                                       "full-attention models only"),
}


def engine_path(name: str) -> EnginePath | None:
    return PATHS.get(name)
