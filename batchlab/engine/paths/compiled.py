"""The ``compiled`` path: l1's schedule, with the decode forward traced by ``mx.compile``.

A decode step of a small model is bound by the host: Python walks every module and
builds a score of lazy ops per layer each step, and MLX encodes them. This path
traces the decode forward once per (B, cache width) and replays the trace every step,
which removes the graph building and fuses elementwise ops.

A trace needs fixed shapes, so attention reads the whole allocated key buffer (the
width grows in steps of 32 columns here) instead of the first ``_idx + 1`` columns, and
a mask built inside the trace hides the columns past the write column and each row's
left padding. Prefill, joins and evictions stay on the l1 code: only the decode forward
is traced (one trace per B and width, shared by every scheduler of a model).

On a GPU the mask array rules out MLX's fused decode attention, so the path gains
little at small B and loses at large B there; ``fast`` is the GPU path (the figures:
``docs/performance.md``).

Reading more (masked) columns and fusing elementwise ops may change the rounding, so
this is a lab path gated by KL statistics against the oracle where it is not bit-exact
(``batchlab.engine.paths.registry``). Only full-attention models are supported: a ring or SSM
layer's update is not a fixed column write (``unsupported_reason`` says why a model is
refused).
"""

from __future__ import annotations

import weakref
from functools import partial

import mlx.core as mx
from mlx import nn
from mlx_lm.models.cache import KVCache

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.core.config import MLX_LM_DEFAULTS, ScheduleConfig
from batchlab.engine.core.factory import BatchCaches
from batchlab.engine.core.layers import single_caches
from batchlab.engine.core.sampler import GREEDY, SamplingParams
from batchlab.engine.core.scheduler import Scheduler, log_softmax


def unsupported_reason(model: nn.Module) -> str | None:
    """Why the compiled path cannot run ``model`` (None: it can)."""
    kinds = sorted({type(c).__name__ for c in single_caches(model) if type(c) is not KVCache})
    if kinds:
        return (f"the compiled decode traces full-attention KVCache layers only; this model "
                f"also has {', '.join(kinds)} layers (use the l1 or fast path)")
    return None


class TracedKV:
    """What the model sees of a BatchKV inside the trace: a fixed-width key buffer
    written at the array column ``idx``, and the step's shared offsets and mask."""

    def __init__(self, keys: mx.array, values: mx.array, idx: mx.array,
                 offset: mx.array, mask: mx.array):
        self.keys, self.values = keys, values
        self.idx, self.offset, self.mask = idx, offset, mask

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.keys = mx.slice_update(self.keys, keys, self.idx, axes=(2,))
        self.values = mx.slice_update(self.values, values, self.idx, axes=(2,))
        return self.keys, self.values

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None):
        if N != 1 or window_size is not None:  # not gated: misuse
            raise ValueError("the traced decode step takes one token per row, no window")
        return self.mask


class CompiledKV(BatchKV):
    """BatchKV growing in steps of 32 columns, not 256: the traced step attends over the
    whole buffer, so a finer step keeps the masked tail short (bf16 attention over 256
    columns at B=8 cost the CPU more than the trace saved). Each new width costs one
    trace, once per process."""

    step = 32


class CompiledScheduler(Scheduler):
    """l1's scheduler whose decode forward is one compiled call."""

    caches = BatchCaches(kv_class=CompiledKV)

    def __init__(self, model: nn.Module, config: ScheduleConfig = MLX_LM_DEFAULTS,
                 sampling: SamplingParams = GREEDY):
        reason = unsupported_reason(model)
        if reason:  # not gated: refusal
            raise ValueError(reason)
        super().__init__(model, config, sampling)
        self._traced_step = traced_decoder(model)

    def _decode_logprobs(self, inputs: mx.array, caches: list) -> mx.array:
        for c in caches:
            c.room_for_one()
        widths = {c.keys.shape[2] for c in caches}
        if len(widths) != 1:  # not gated: misuse
            raise RuntimeError(f"layer key buffers differ in width ({sorted(widths)})")
        idx = caches[0]._idx
        left_padding = caches[0].left_padding
        buffers = [a for c in caches for a in (c.keys, c.values)]
        logprobs, *buffers = self._traced_step(inputs, mx.array([idx], mx.int32),
                                               left_padding, *buffers)
        for i, c in enumerate(caches):
            c.keys, c.values = buffers[2 * i], buffers[2 * i + 1]
            c.wrote_one()
        return logprobs


_DECODERS: dict[int, tuple[weakref.ref, object]] = {}


def traced_decoder(model: nn.Module):
    """The compiled decode forward of ``model``, shared by every scheduler of it: a
    trace (one per B and width, kept by mx.compile) then outlives a single run."""
    key = id(model)
    ref, fn = _DECODERS.get(key, (None, None))
    if ref is None or ref() is not model:
        fn = mx.compile(partial(decode_forward, model))
        _DECODERS[key] = (weakref.ref(model, lambda _: _DECODERS.pop(key, None)), fn)
    return fn


def decode_forward(model, inputs, idx, left_padding, *buffers):
    """The traced function: pure in its arrays (weights are captured constants)."""
    width = buffers[0].shape[2]
    cols = mx.arange(width)[None, :]
    mask = (cols >= left_padding[:, None]) & (cols <= idx)
    mask = mask[:, None, None, :]  # (B, 1, 1, width)
    offset = idx - left_padding
    caches = [TracedKV(buffers[i], buffers[i + 1], idx, offset, mask)
              for i in range(0, len(buffers), 2)]
    logits = model(inputs[:, None], cache=caches)[:, -1, :]
    logprobs = log_softmax(logits)
    return (logprobs, *[a for c in caches for a in (c.keys, c.values)])

