"""The ``fast`` path: l1's schedule and layouts, minus the decode masks that hide nothing.

At a decode step (N = 1) a full-attention row without left padding sees every key, so its
mask is all True. mlx-lm's BatchGenerator still builds and passes it, where its
single-stream ``generate_step`` (a plain KVCache) passes ``None``; on CUDA an array mask
rules out MLX's fused decode attention (several kernels per layer instead of one). This
path hands the model ``None`` exactly when the mask would be all True, on every backend
(l1 does so only on the CPU backend, where it cannot change a bit: ``BatchKV``).

Its decode forward keeps the hidden state flat, ``(B, D)``, on llama and qwen3 models
(``flat_decode.py``: the modules' kernels on fewer graph nodes, the same bits); other
models run the modules' forward, as all do with ``BATCHLAB_FAST_FLAT=0``.

On CUDA it decodes unmasked steps with its own attention kernel, which reads each KV
head once for its query group where MLX's reads it once per query head
(``engine/kernels/grouped_decode.py``; ``BATCHLAB_FAST_GQA=0`` switches it off). By
default that kernel has its own float order, a key a lane (``grouped_decode_tiled.py``),
so fast's GPU bits are not MLX's; fast on a GPU is judged by KL against the oracle
(``FAST_KL_GATE_GPU_16BIT``). ``BATCHLAB_GQA_TILED=0`` puts every query head through MLX's
kernel's float operations in MLX's order instead, so the attention's output is MLX's bit
for bit, at a longer step (docs/performance.md).

A decode step of one row makes each layer's q/k/v and gate/up projections as one product
each, weights concatenated once (``fused_projections.py``): that step is bound by the
host, which encodes and launches every kernel, and on CUDA and the CPU the one product
gives the same bits. It is on by default on the CPU, where the gate checks it, and opt-in
on CUDA (``BATCHLAB_FAST_ONE_ROW=1``), where fewer kernels have not yet made a step
shorter (docs/performance.md); ``BATCHLAB_FAST_ONE_ROW=0`` switches it off.
``BATCHLAB_FAST_FUSE=1`` adds one q/k/v GEMM from ``FUSE_MIN_ROWS`` rows on CUDA; a wider
GEMM rounds otherwise, so it is off by default (docs/performance.md).
``BATCHLAB_FAST_CHAIN=1`` (CUDA) makes a step of one row four kernels a layer, each
product with the vector ops around it (``chain_decode.py``, ``kernels/row_chain.py``):
another summing order, judged by the same KL gate. It is opt-in: on the H200 it flipped
one near-tied top-1 on a tiny model's gate cell and shortened no step beyond the host's
noise (reports/bench/cuda-sm90/issue28-chain/).
On CUDA a step of one row is one kernel for all the layers, its blocks meeting at a grid
barrier between a layer's phases (``persistent_decode.py``, ``kernels/row_step.py``): the
host launches ~6 kernels a step, where the step of one row is bound by the host. Judged
by the same KL gate. On by default where the model fits it (llama and qwen3, head dims a
multiple of 64) and its layers are small (``persistent_decode.on_by_default``);
``BATCHLAB_FAST_PERSISTENT=1`` switches it on for any model it fits, ``=0`` off
(reports/bench/cuda-sm90/issue28-persistent/).
``BATCHLAB_FAST_PRETRANSPOSE=1`` runs a clone of the model whose projections keep ``W.T``
made once (``pretransposed.py``: one node fewer per projection, the same operands and
kernel); opt-in until an H200 run shows its bits unchanged (``pretranspose_probe.py``).

Masked and unmasked attention and the wider GEMMs may round differently,
so this is not l1: the gate is bit-exact against the oracle where
it stays exact (the CPU backend, which runs none of the CUDA parts) and KL statistics
against it where it does not (``batchlab.engine.paths.registry``). On a GPU with real
head dims it is not bit-exact (``docs/results.md``).
"""

from __future__ import annotations

import os

import mlx.core as mx
from mlx import nn

from batchlab.backend import on_cuda
from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.core.config import MLX_LM_DEFAULTS, ScheduleConfig
from batchlab.engine.core.factory import BatchCaches
from batchlab.engine.core.sampler import GREEDY, SamplingParams
from batchlab.engine.core.scheduler import Scheduler, log_softmax
from batchlab.engine.kernels.attention_dispatch import install_dispatch
from batchlab.engine.paths.fast import chain_decode, flat_decode, persistent_decode
from batchlab.engine.paths.fast.fused_projections import (
    ONE_ROW_GROUPS,
    QKV,
    fused,
    fused_model,
    one_row_products_exact,
)
from batchlab.engine.paths.fast.pretransposed import PRETRANSPOSE_ENV, pretransposed_model

CHAIN_ENV = "BATCHLAB_FAST_CHAIN"  # one row's layer as four kernels (chain_decode.py)
FUSE_MIN_ROWS = 64  # BATCHLAB_FAST_FUSE=1's q/k/v GEMM: a wide one fills the device


def _switched_on(name: str, default: str = "0") -> bool:  # not gated: gpu only
    return os.environ.get(name, default) == "1"


def _opted_in(env: str, module, forward: type, model: nn.Module,
              by_default=lambda model: False):
    """A one-row forward of ``module`` (the chain, the one-kernel step) for ``model``, on
    CUDA, where ``module.unsupported_reason`` takes the model and ``env`` is "1" (unset:
    where ``by_default(model)``)."""
    if on_cuda() and module.unsupported_reason(model) is None:  # not gated: gpu only
        switch = os.environ.get(env)
        if switch == "1" or (switch is None and by_default(model)):  # not gated: gpu only
            return forward(model)
    return None


class UnmaskedDecodeKV(BatchKV):
    """A BatchKV whose decode mask is ``None`` when no row is padded, on every backend."""

    groups_decode = False  # the grouped decode kernel (CUDA): set by FastScheduler

    @staticmethod
    def drops_all_true_decode_mask() -> bool:
        return True


class GroupedDecodeKV(UnmaskedDecodeKV):
    """The same, whose decode attention the dispatch sends to the grouped kernel (CUDA)."""

    groups_decode = True


class FastScheduler(Scheduler):
    caches = BatchCaches(kv_class=UnmaskedDecodeKV)

    def __init__(self, model: nn.Module, config: ScheduleConfig = MLX_LM_DEFAULTS,
                 sampling: SamplingParams = GREEDY, row_sampler: type | None = None):
        # on CUDA one-row fusion is opt-in: on the H200 it shortened no step and
        # lengthened qwen3-0.6b's (reports/bench/cuda-sm90/issue28-one-row/)
        self._fuse_one_row = one_row_products_exact() and _switched_on(
            "BATCHLAB_FAST_ONE_ROW", default="0" if on_cuda() else "1")
        self._fuse_wide = on_cuda() and _switched_on("BATCHLAB_FAST_FUSE")
        if self._fuse_one_row or self._fuse_wide:
            model = fused_model(model)
        if on_cuda() and _switched_on(PRETRANSPOSE_ENV):  # not gated: gpu only
            # a clone (after the fusion, whose members it leaves alone): W.T made once
            model = pretransposed_model(model)
        super().__init__(model, config, sampling, row_sampler)
        self._flat = (flat_decode.supports(self.model)
                      and _switched_on("BATCHLAB_FAST_FLAT", default="1"))
        if on_cuda() and _switched_on("BATCHLAB_FAST_GQA", default="1"):  # not gated: gpu only
            install_dispatch()
            self.caches = BatchCaches(kv_class=GroupedDecodeKV)
        self._chain = _opted_in(CHAIN_ENV, chain_decode, chain_decode.RowChain, self.model)
        self._row_step = _opted_in(persistent_decode.PERSISTENT_ENV, persistent_decode,
                                   persistent_decode.RowStep, self.model,
                                   persistent_decode.on_by_default)

    def _decode_logprobs(self, inputs: mx.array, caches: list) -> mx.array:
        rows = inputs.shape[0]
        step = self._row_step
        if rows == 1 and step is not None and step.runs(caches):  # not gated: gpu only
            return log_softmax(step.logits(inputs, caches))
        if rows == 1 and self._chain is not None:  # not gated: gpu only
            return log_softmax(self._chain.logits(inputs, caches))
        if rows == 1 and self._fuse_one_row:
            with fused(ONE_ROW_GROUPS, biased=False):
                return self._unfused_decode_logprobs(inputs, caches)
        if self._fuse_wide and rows >= FUSE_MIN_ROWS:  # not gated: gpu only
            with fused((QKV,)):
                return self._unfused_decode_logprobs(inputs, caches)
        return self._unfused_decode_logprobs(inputs, caches)

    def _unfused_decode_logprobs(self, inputs: mx.array, caches: list) -> mx.array:
        if not self._flat:
            return super()._decode_logprobs(inputs, caches)
        # looked up at call time: bench profile times it as the forward's build
        return log_softmax(flat_decode.flat_logits(self.model, inputs, caches))
