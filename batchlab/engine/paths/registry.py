"""The engine's paths: what each one runs (its scheduler and caches) and what it refuses.

    l1        batchlab's own primitives on mlx-lm's schedule and layouts; bit-exact, always
    fast      l1 without all-True full-attention decode masks; bit-exact where exact, else KL
    compiled  l1 with the decode forward traced by mx.compile (full-attention models); KL
    kv8 kv4   l1's schedule with 8- / 4-bit quantized KV (group 64, from offset 0); gated
              against mlx-lm's serial QuantizedKVCache row by row: bit-exact or KL
    kvmix     4-bit KV, 8-bit in the most KL-sensitive quarter of the layers; as kv8
    kv8-g32 kv4-g32 kv8-s8 kv4-s8   group 32, or a quantized-KV start of 8
    kv4h      4-bit KV, Hadamard-rotated keys served dequantized; no oracle: lab kl only
    invariant every row equal to itself run alone on this path, at any B and schedule
    invariant-blocked  the same with its GPU measures on every backend (8-row GEMMs)
    l1-solo   l1 under another name: the invariance gate's negative control
    paged     l1's schedule and layout over KV blocks with prefix sharing; bit-exact

A new path is one entry in ``PATHS``: its scheduler and what it refuses. The matrix
runner, the server and the bench all resolve names here (``resolve_path``), and the bench
times every entry with the same driver. How the harness judges a path (its reference,
its KL gate) is the harness's: ``batchlab/judging/judging.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlx import nn

from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.compiled import CompiledScheduler, unsupported_reason
from batchlab.engine.paths.fast.path import FastScheduler
from batchlab.engine.paths.invariant.path import (
    BlockedInvariantScheduler,
    InvariantScheduler,
    refuses_latent_attention,
)
from batchlab.engine.paths.paged.path import PagedScheduler
from batchlab.engine.paths.quantized.path import KVScheme, refuses_quantized, scheduler_for
from batchlab.engine.paths.refusals import (
    first_refusal,
    key_width_refusal,
    scalar_offset_refusal,
)


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
    refuses: Callable[[nn.Module], str | None] = _takes_every_model  # why not this model
    kv_scheme: KVScheme | None = None  # quantized KV: how each attention layer is stored


def _kv_path(name: str, scheme: KVScheme) -> EnginePath:
    return EnginePath(name=name, scheduler=scheduler_for(scheme, name),
                      refuses=refuses_quantized(scheme), kv_scheme=scheme)


def kv_path_name(bits: int, group_size: int = 64, start: int = 0) -> str:
    """``kv<bits>``, closed by the settings off mlx-lm's defaults (group 64, start 0):
    kv8, kv4-g32, kv8-s8, kv4-g32-s8."""
    return (f"kv{bits}" + (f"-g{group_size}" if group_size != 64 else "")
            + (f"-s{start}" if start else ""))


PATHS: dict[str, EnginePath] = {
    "l1": EnginePath(name="l1", scheduler=Scheduler),
    "fast": EnginePath(name="fast", scheduler=FastScheduler),
    "compiled": EnginePath(name="compiled", scheduler=CompiledScheduler,
                           refuses=first_refusal(
                               unsupported_reason,
                               scalar_offset_refusal(
                                   "compiled", "the traced decode step hands it an array"),
                               key_width_refusal(
                                   "compiled", "the traced decode step hands it a fixed-width "
                                   "buffer and no keys_and_values"))),
}


def kv_path_for(bits: int, group_size: int = 64, start: int = 0) -> str:
    """The name of the quantized-KV path with these settings (mlx-lm's ``--kv-bits``,
    ``--kv-group-size``, ``--quantized-kv-start``), registered as ``kv_path_name``'s
    name when no entry has them yet. Raises ValueError for settings mx.quantize lacks.
    The matrix's uniform kv paths are registered here too, so the gate runs the paths
    serve's flags pick, built by the same code."""
    scheme = KVScheme(bits=bits, group_size=group_size, start=start)
    for name, path in PATHS.items():
        if path.kv_scheme == scheme:  # one way: serve
            return name
    from batchlab.engine.paths.quantized.kv import KVQuant

    KVQuant(bits=bits, group_size=group_size, start=start)  # validates, says what to choose
    name = kv_path_name(bits, group_size, start)
    PATHS[name] = _kv_path(name, scheme)
    return name


for _bits, _group_size, _start in ((8, 64, 0), (4, 64, 0), (8, 32, 0), (4, 32, 0),
                                   (8, 64, 8), (4, 64, 8)):
    kv_path_for(_bits, _group_size, _start)  # kv8 kv4 kv8-g32 kv4-g32 kv8-s8 kv4-s8

# why the invariant paths cannot run them: a batch invariant to B must run B > 1, and
# the blocked path pads even one row to a block of rows
_ROWS_AS_ARRAY = "a batch of rows (a padded GEMM block, even for one row) hands it one offset a row"
_PADDED_WIDTH = ("a batch hands a row its keys at the batch's padded width, so the row "
                 "alone would see other positions")


def _invariant_refusal(path: str, row_block: int | None) -> Callable[[nn.Module], str | None]:
    return first_refusal(refuses_latent_attention(row_block),
                         scalar_offset_refusal(path, _ROWS_AS_ARRAY),
                         key_width_refusal(path, _PADDED_WIDTH))


PATHS.update({
    "kvmix": _kv_path("kvmix", KVScheme(bits=4, high_bits=8)),
    "kv4h": _kv_path("kv4h", KVScheme(bits=4, rotated=True)),
    "invariant": EnginePath(name="invariant", scheduler=InvariantScheduler,
                            refuses=_invariant_refusal("invariant",
                                                       InvariantScheduler.row_block)),
    "invariant-blocked": EnginePath(
        name="invariant-blocked", scheduler=BlockedInvariantScheduler,
        refuses=_invariant_refusal("invariant-blocked", BlockedInvariantScheduler.row_block)),
    # the invariance gate's negative control: l1 under the solo judge, which it must fail
    # on a GPU (matrices/invariant-control.toml)
    "l1-solo": EnginePath(name="l1-solo", scheduler=Scheduler),
    "paged": EnginePath(name="paged", scheduler=PagedScheduler),
})


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

