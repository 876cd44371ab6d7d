"""The engine's paths: how a cell runs, and how its result is gated against the oracle.

    l1        batchlab's own primitives on mlx-lm's schedule and layouts; bit-exact, always
    fast      l1 without all-True full-attention decode masks; bit-exact where exact, else KL
    compiled  l1 with the decode forward traced by mx.compile (full-attention models); KL
    kv8 kv4   l1's schedule with 8- / 4-bit quantized KV (group 64, from offset 0); gated
              against mlx-lm's serial QuantizedKVCache row by row: bit-exact or KL
    kvmix     4-bit KV, 8-bit in the most KL-sensitive quarter of the layers; as kv8
    kv8-g32 kv4-g32 kv8-s8 kv4-s8   group 32, or a quantized-KV start of 8
    kv4h      4-bit KV, Hadamard-rotated keys served dequantized; no oracle: lab kl only
    invariant every row equal to itself run alone on this path, at any B and schedule;
              gated row by row against its solo runs (``reference = "solo"``), not the oracle
    invariant-blocked  the same with its GPU measures on every backend (8-row GEMMs)
    l1-solo   l1 judged by the solo reference: the invariance gate's negative control

A new path is one entry in ``PATHS``: its scheduler, its gate and what it refuses. The
matrix runner, the server and the bench all resolve names here (``resolve_path``), and
the bench times every entry with the same driver. Gate tolerances live with the
statistics they judge (``batchlab.judging.kl``); l1 has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlx import nn

from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.compiled import CompiledScheduler, unsupported_reason
from batchlab.engine.paths.fast import FastScheduler
from batchlab.engine.paths.invariant.path import BlockedInvariantScheduler, InvariantScheduler
from batchlab.engine.paths.quantized.path import KVScheme, refuses_quantized, scheduler_for
from batchlab.judging.kl import KV4_KL_GATE, KV8_KL_GATE, LAB_KL_GATE, KLGate


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
    kv_scheme: KVScheme | None = None  # quantized KV: the oracle is mlx-lm's serial run
    # what a cell is compared with: "oracle" (mlx-lm's goldens, or live) or "solo" (each
    # row against its own run alone on this same path: batch invariance, no golden)
    reference: str = "oracle"


def _kv_path(name: str, scheme: KVScheme, gate: KLGate) -> EnginePath:
    return EnginePath(name=name, scheduler=scheduler_for(scheme, name), kl_gate=gate,
                      refuses=refuses_quantized(scheme), kv_scheme=scheme)


PATHS = {
    "l1": EnginePath(name="l1", scheduler=Scheduler, kl_gate=None),
    "fast": EnginePath(name="fast", scheduler=FastScheduler, kl_gate=LAB_KL_GATE),
    "compiled": EnginePath(name="compiled", scheduler=CompiledScheduler, kl_gate=LAB_KL_GATE,
                           refuses=unsupported_reason),
    "kv8": _kv_path("kv8", KVScheme(bits=8), KV8_KL_GATE),
    "kv4": _kv_path("kv4", KVScheme(bits=4), KV4_KL_GATE),
    "kvmix": _kv_path("kvmix", KVScheme(bits=4, high_bits=8), KV4_KL_GATE),
    "kv8-g32": _kv_path("kv8-g32", KVScheme(bits=8, group_size=32), KV8_KL_GATE),
    "kv4-g32": _kv_path("kv4-g32", KVScheme(bits=4, group_size=32), KV4_KL_GATE),
    "kv8-s8": _kv_path("kv8-s8", KVScheme(bits=8, start=8), KV8_KL_GATE),
    "kv4-s8": _kv_path("kv4-s8", KVScheme(bits=4, start=8), KV4_KL_GATE),
    "kv4h": _kv_path("kv4h", KVScheme(bits=4, rotated=True), KV4_KL_GATE),
    "invariant": EnginePath(name="invariant", scheduler=InvariantScheduler, kl_gate=None,
                            reference="solo"),
    "invariant-blocked": EnginePath(name="invariant-blocked", kl_gate=None, reference="solo",
                                    scheduler=BlockedInvariantScheduler),
    # the invariance gate's negative control: l1 judged by the solo reference, which it
    # must fail on a GPU (matrices/invariant-control.toml)
    "l1-solo": EnginePath(name="l1-solo", scheduler=Scheduler, kl_gate=None, reference="solo"),
}


def kv_path_for(bits: int, group_size: int = 64, start: int = 0) -> str:  # not gated: serve
    """The name of the quantized-KV path with these settings (mlx-lm's ``--kv-bits``,
    ``--kv-group-size``, ``--quantized-kv-start``), registered as ``kv<bits>-g<group>-s<start>``
    when no entry has them yet. Raises ValueError for settings mx.quantize lacks."""
    scheme = KVScheme(bits=bits, group_size=group_size, start=start)
    for name, path in PATHS.items():
        if path.kv_scheme == scheme:
            return name
    from batchlab.engine.paths.quantized.kv import KVQuant

    KVQuant(bits=bits, group_size=group_size, start=start)  # validates, says what to choose
    name = f"kv{bits}-g{group_size}-s{start}"
    PATHS[name] = _kv_path(name, scheme, KV8_KL_GATE if bits == 8 else KV4_KL_GATE)
    return name


def resolve_path(name: str, model: nn.Module | None = None, *, model_name: str = "this model",
                 use: str = "run") -> EnginePath:
    """The path called ``name``, checked against ``model`` when one is given (check the
    name before loading a model: ``resolve_path(name)``, then again with the model).

    Raises ``Unsupported`` naming the known paths, or the path's reason to refuse the
    model (``use`` is the verb of that message: "run", "serve", "time")."""
    path = PATHS.get(name)
    if path is None:  # not gated: input
        known = ", ".join(PATHS)
        raise Unsupported(f"unknown path {name!r}; known: {known}",
                          reason=f"the engine has no path {name!r} (known: {known})")
    refusal = None if model is None else path.refuses(model)
    if refusal:
        raise Unsupported(f"path {name!r} cannot {use} {model_name}: {refusal}", reason=refusal)
    return path

