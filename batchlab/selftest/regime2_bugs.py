"""Seeded bugs of the gate's second round (issue 26): the regimes, the quantized start and
quantized history that the default matrix reaches since then.

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog (``catalog_rounds.py`` names the cells that catch it).
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.core import sampler as core_sampler
from batchlab.engine.core import scheduler as core_scheduler
from batchlab.engine.core.factory import BatchCaches
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.compiled import CompiledScheduler
from batchlab.engine.paths.quantized.caches import QuantizedCaches
from batchlab.engine.paths.quantized.kv import QuantizedMode
from batchlab.selftest.inject import Patch, original


def start_one_write_late() -> list[Patch]:
    """The quantized-KV switch tests ``offset > start`` instead of ``>= start``: a batch
    whose rows cross the start while decoding quantizes one write after mlx-lm's
    ``maybe_quantize_kv_cache`` would (it quantizes after the forward that reaches it)."""

    def buggy(self) -> bool:
        return self.offset_ints.bounds()[1] > max(self.quant.start, 1)

    return [Patch(owner=QuantizedMode, name="passed_start", value=buggy)]


def history_rows_unquantized() -> list[Patch]:
    """A quantized path merges rows that bring history into plain model-dtype caches
    (``layers.merge_rows`` has no quantized case): the defect issue 26 found, where a
    fresh quantized row joining such a batch then crashes."""

    def buggy(self, model, per_row):
        return BatchCaches().merged(model, per_row)

    return [Patch(owner=QuantizedCaches, name="merged", value=buggy)]


def equal_samplers_one_draw() -> list[Patch]:
    """Rows whose own samplers have equal settings are sampled in one batched draw, as if
    they shared one sampler object; BatchGenerator draws once per row unless every row
    holds the very same object (separate objects with equal parameters included)."""
    clean = original(core_sampler, "sample_rows")

    def buggy(logprobs, samplers):
        first = samplers[0]
        if not first.params.greedy and all(s.params == first.params for s in samplers):
            return first(logprobs)
        return clean(logprobs, samplers)

    return [Patch(owner=core_scheduler, name="sample_rows", value=buggy)]


def completion_cap_not_raised() -> list[Patch]:
    """The decode batch's cap is ``completion_batch_size`` as given, where BatchGenerator
    raises it to at least ``prefill_batch_size``: with a completion batch smaller than the
    prefill batch, rows wait in the queue that mlx-lm would have admitted."""
    clean = original(Scheduler, "__init__")

    def buggy(self, model, config=None, *args, **kwargs):
        if config is None:
            clean(self, model, *args, **kwargs)
        else:
            clean(self, model, config, *args, **kwargs)
        self.max_decoding = self.config.completion_batch_size

    return [Patch(owner=Scheduler, name="__init__", value=buggy)]


def compiled_skips_processors() -> list[Patch]:
    """The compiled path runs its traced decode (logsumexp inside the trace) even when a
    row carries logits processors, so their penalties and biases never apply there."""

    clean = original(Scheduler, "_processed_logprobs")

    def buggy(self, inputs, caches, seqs):
        if isinstance(self, CompiledScheduler):
            return self._decode_logprobs(inputs, caches)
        return clean(self, inputs, caches, seqs)

    return [Patch(owner=Scheduler, name="_processed_logprobs", value=buggy)]


def scales_stored_bf16() -> list[Patch]:
    """The packed layout stores scales and biases as bfloat16 (one uint32 word per two
    groups, the layout of every bf16 model) whatever the keys' dtype: float32 KV loses
    the low half of each scale and bias, and only models whose KV is float32 see it."""
    from batchlab.engine.paths.quantized import kv as quantized_kv

    def pack(x, q):
        w, scales, biases = mx.quantize(x, group_size=q.group_size, bits=q.bits)
        sb = mx.concatenate([scales, biases], axis=-1).astype(mx.bfloat16)
        return mx.concatenate([w, sb.view(mx.uint32)], axis=-1)

    def unpack(p, q, dim, dtype):
        ints = dim * q.bits // 32
        groups = dim // q.group_size
        sb = mx.contiguous(p[..., ints:]).view(mx.bfloat16).astype(dtype)
        return p[..., :ints], sb[..., :groups], sb[..., groups:]

    return [Patch(owner=quantized_kv, name="pack", value=pack),
            Patch(owner=quantized_kv, name="unpack", value=unpack)]


def blocked_pad_rows_float32() -> list[Patch]:
    """Row blocking pads its input with float32 zero rows (``mx.zeros``' default dtype):
    the concatenation promotes a bf16 block to float32, so a row in a block that needed
    padding (a row alone) is computed in float32 and a row in a full block in bf16."""
    from batchlab.engine.paths.invariant import rowblock

    def buggy(fn, x, rows):
        lead, k = x.shape[:-1], x.shape[-1]
        flat = x.reshape(-1, k)
        m = flat.shape[0]
        padded = -(-m // rows) * rows
        if padded != m:
            flat = mx.concatenate([flat, mx.zeros((padded - m, k))])
        parts = [fn(flat[i : i + rows]) for i in range(0, padded, rows)]
        out = parts[0] if len(parts) == 1 else mx.concatenate(parts)
        return out[:m].reshape(*lead, out.shape[-1])

    return [Patch(owner=rowblock, name="blocked_rows", value=buggy)]
