"""The quantized-KV paths' scheduler: l1's schedule with quantized attention caches.

A ``KVScheme`` says how each attention layer's cache is quantized: one ``KVQuant`` for
every layer (``kv8``, ``kv4``), or a mixed scheme (``kvmix``): ``high_bits`` for the
layers whose quantization moves the output most, measured by KL
(``batchlab.engine.paths.quantized.sensitivity``), ``bits`` for the rest. SSM / conv state
stays as it is.

Layers are counted over the model's attention caches (KVCache and RotatingKVCache
leaves of ``make_cache()``, CacheList parts in order): index i of a scheme's plan is
the i-th attention cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlx import nn
from mlx_lm.models.cache import RotatingKVCache

from batchlab.engine.core.layers import uses_latent_attention
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.quantized.caches import (
    QuantizedCaches,
    attention_templates,
    count_attention_caches,
)
from batchlab.engine.paths.quantized.kv import BatchQuantizedKV, KVQuant
from batchlab.engine.paths.quantized.rotated import BatchRotatedKV


@dataclass(frozen=True, slots=True, kw_only=True)
class KVScheme:
    bits: int
    group_size: int = 64
    start: int = 0
    high_bits: int | None = None  # mixed: bits of the most KL-sensitive layers
    high_share: float = 0.25  # mixed: that share of the attention layers (at least one)
    rotated: bool = False  # Hadamard-rotated keys, served dequantized (rotated_kv.py)

    @property
    def mixed(self) -> bool:
        return self.high_bits is not None

    def quant(self, bits: int) -> KVQuant:
        return KVQuant(bits=bits, group_size=self.group_size, start=self.start)

    def plan(self, model: nn.Module) -> list[KVQuant]:
        """One KVQuant per attention cache of ``model``."""
        n = count_attention_caches(model)
        if not self.mixed:
            return [self.quant(self.bits)] * n
        from batchlab.engine.paths.quantized.sensitivity import layer_sensitivity

        ranked = sorted(range(n), key=lambda i: -layer_sensitivity(model, self)[i])
        high = set(ranked[: max(1, math.ceil(self.high_share * n))])
        return [self.quant(self.high_bits if i in high else self.bits) for i in range(n)]


class QuantizedScheduler(Scheduler):
    """l1's scheduler; fresh rows get quantized caches. A path's subclass sets ``scheme``."""

    scheme: KVScheme

    def __init__(self, model: nn.Module, *args, **kwargs):
        super().__init__(model, *args, **kwargs)
        self.plan = self.scheme.plan(model)
        kv_class = BatchRotatedKV if self.scheme.rotated else BatchQuantizedKV
        self.caches = QuantizedCaches(plan=tuple(self.plan), kv_class=kv_class)

    def _admit(self) -> None:
        """l1's admission, but rows at different quantization stages never share a prompt
        batch: one batch cache has one format switch, and mlx-lm quantizes a fresh row
        after its own first forward while a row with history brings (or gets) quantized
        caches. So rows are admitted only into an empty prompt batch, and only a run of
        queued rows that all have history, or all have none; the rest wait. (The oracle
        of these paths is each row alone, so the schedule is the path's to choose.)"""
        if len(self.prompt) or not self.queue:
            return
        first = self.queue[0].request.history is not None
        n = next((i for i, s in enumerate(self.queue)
                  if (s.request.history is not None) != first), len(self.queue))
        self.queue, held = self.queue[:n], self.queue[n:]
        try:
            super()._admit()
        finally:
            self.queue += held


def scheduler_for(scheme: KVScheme, name: str) -> type[QuantizedScheduler]:
    return type(f"QuantizedScheduler_{name}", (QuantizedScheduler,), {"scheme": scheme})


def refuses_quantized(scheme: KVScheme):
    """Why ``scheme`` cannot run a model, or None (head dims must split into groups;
    mlx-lm's quantized attention has no sinks)."""

    def refuses(model: nn.Module) -> str | None:
        if type(model).__module__.endswith("gpt_oss"):  # not gated: refusal
            return "gpt-oss attention uses sinks, which mlx-lm's quantized SDPA refuses"
        if count_attention_caches(model) == 0:  # not gated: refusal
            return "the model has no attention caches to quantize"
        if uses_latent_attention(model):  # not gated: refusal
            return ("multi-head latent attention reads its cached RoPE keys outside "
                    "attention (q_pe @ k_pe^T), which a quantized cache hands back packed: "
                    "mlx-lm's QuantizedKVCache cannot run it either")
        rings = any(type(c) is RotatingKVCache for c in attention_templates(model))
        if scheme.rotated and rings:
            return "rotated keys are implemented for full-attention layers only"
        for dim in head_dims(model):
            if scheme.rotated and dim & (dim - 1):
                return f"a Hadamard rotation needs a power-of-two head dim, not {dim}"
            if dim % scheme.group_size:  # not gated: refusal
                return (f"head dim {dim} is not a multiple of the kv group size "
                        f"{scheme.group_size} (mx.quantize groups are 32, 64 or 128)")
        return None

    return refuses


def head_dims(model: nn.Module) -> set[int]:
    args = getattr(model, "args", None)
    cfg = vars(args) if args is not None else {}
    dims = {cfg.get("head_dim") or 0, cfg.get("global_head_dim") or 0}
    unnamed = not (dims - {0}) and cfg.get("hidden_size") and cfg.get("num_attention_heads")
    if unnamed:
        dims = {cfg["hidden_size"] // cfg["num_attention_heads"]}
    return dims - {0}
