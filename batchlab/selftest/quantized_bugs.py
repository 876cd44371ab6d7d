"""Seeded bugs in the quantized batch caches (``batchlab/engine/quantized_*.py``).

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog. ``unpack`` is called through the module's global, so patching the module
reaches every cache.
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.paths.quantized import kv as quantized_kv
from batchlab.engine.paths.quantized.kv import QuantizedMode
from batchlab.engine.paths.quantized.path import KVScheme
from batchlab.engine.paths.quantized.ring import BatchQuantizedRing
from batchlab.selftest.inject import Patch, original, wrapped


def scales_biases_swapped() -> list[Patch]:
    """The packed column read back as (ints, biases, scales): the pack order and the
    unpack order disagree, so every key dequantizes with its bias as the scale."""
    clean = original(quantized_kv, "unpack")

    def buggy(p, q, dim, dtype):
        w, scales, biases = clean(p, q, dim, dtype)
        return w, biases, scales

    return [Patch(owner=quantized_kv, name="unpack", value=buggy)]


def quantized_before_first_forward() -> list[Patch]:
    """The switch tests ``offset >= start`` alone: at start 0 an empty cache is quantized
    before its prompt, so the prefill attends over quantized keys, where mlx-lm quantizes
    only after the forward (``maybe_quantize_kv_cache`` runs after the model call)."""

    def buggy(self) -> bool:
        return self.offset_ints.bounds()[1] >= self.quant.start

    return [Patch(owner=QuantizedMode, name="passed_start", value=buggy)]


def mixed_plan_uniform() -> list[Patch]:
    """The mixed scheme's plan collapses to its low bits in every layer (the per-layer
    choice measured by KL is lost when the caches are built)."""
    clean = original(KVScheme, "plan")

    def buggy(self, model):
        plan = clean(self, model)
        return [self.quant(self.bits)] * len(plan) if self.mixed else plan

    return [Patch(owner=KVScheme, name="plan", value=buggy)]


def ring_scales_as_float16() -> list[Patch]:
    """The quantized ring reads its scales and biases as float16 (GGUF's convention, and
    the real model's weight scales) instead of the model dtype (bfloat16): every decode
    step of a sliding-window layer dequantizes garbage."""

    def make(clean):
        def buggy(self):
            if not isinstance(self, BatchQuantizedRing):
                return clean(self)
            k, v = BatchRing.keys_and_values(self)
            if not self.quantized:
                return k, v
            dk, dv, dtype = self._dims

            def misread(p, dim):  # float16 bits, converted to the model dtype they should be
                w, scales, biases = quantized_kv.unpack(p, self.quant, dim, mx.float16)
                return w, scales.astype(getattr(mx, dtype)), biases.astype(getattr(mx, dtype))

            return misread(k, dk), misread(v, dv)
        return buggy

    # the quantized caches share keys_and_values (QuantizedMode); this one misreads rings
    return [wrapped(QuantizedMode, "keys_and_values", make)]
