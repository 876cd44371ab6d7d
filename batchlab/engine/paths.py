"""The engine's paths: how a cell runs, and how its result is gated against the oracle.

    l1        batchlab's own primitives on mlx-lm's schedule and layouts; bit-exact, always
    fast      l1 without all-True full-attention decode masks; bit-exact where exact, else KL
    compiled  l1 with the decode forward traced by mx.compile (full-attention models); KL
    invariant every row equal to itself run alone on this path, at any B and schedule;
              gated row by row against its solo runs (``reference = "solo"``), not the oracle

A new path is one entry in ``PATHS``: its scheduler, its gate and what it refuses. The
matrix runner, the server and the bench all resolve names here (``resolve_path``), and
the bench times every entry with the same driver. Gate tolerances live with the
statistics they judge (``batchlab.lab.kl``); l1 has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlx import nn

from batchlab.engine.compiled import CompiledScheduler, unsupported_reason
from batchlab.engine.fast import FastScheduler
from batchlab.engine.invariant import InvariantScheduler
from batchlab.engine.scheduler import Scheduler
from batchlab.lab.kl import LAB_KL_GATE, KLGate


class Unsupported(ValueError):
    """The engine lacks what a cell needs (an unknown path, or a path that refuses the
    model): reported as UNSUPPORTED, not a failure. ``reason`` is the refusal alone."""

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


def _takes_every_model(model: nn.Module) -> str | None:
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class EnginePath:
    name: str
    scheduler: type[Scheduler]
    kl_gate: KLGate | None  # None: bit-exact or FAIL
    refuses: Callable[[nn.Module], str | None] = _takes_every_model  # why not this model
    # what a cell is compared with: "oracle" (mlx-lm's goldens, or live) or "solo" (each
    # row against its own run alone on this same path: batch invariance, no golden)
    reference: str = "oracle"


PATHS = {
    "l1": EnginePath(name="l1", scheduler=Scheduler, kl_gate=None),
    "fast": EnginePath(name="fast", scheduler=FastScheduler, kl_gate=LAB_KL_GATE),
    "compiled": EnginePath(name="compiled", scheduler=CompiledScheduler, kl_gate=LAB_KL_GATE,
                           refuses=unsupported_reason),
    "invariant": EnginePath(name="invariant", scheduler=InvariantScheduler, kl_gate=None,
                            reference="solo"),
}


def resolve_path(name: str, model: nn.Module | None = None, *, model_name: str = "this model",
                 use: str = "run") -> EnginePath:
    """The path called ``name``, checked against ``model`` when one is given (check the
    name before loading a model: ``resolve_path(name)``, then again with the model).

    Raises ``Unsupported`` naming the known paths, or the path's reason to refuse the
    model (``use`` is the verb of that message: "run", "serve", "time")."""
    path = PATHS.get(name)
    if path is None:
        known = ", ".join(PATHS)
        raise Unsupported(f"unknown path {name!r}; known: {known}",
                          reason=f"the engine has no path {name!r} (known: {known})")
    refusal = None if model is None else path.refuses(model)
    if refusal:
        raise Unsupported(f"path {name!r} cannot {use} {model_name}: {refusal}", reason=refusal)
    return path

