"""Projections whose ``W.T`` is made once, not once per call (the fast path, opt-in).

mlx-lm's ``nn.Linear`` computes ``x @ self.weight.T``: every call records a Transpose
node before its Matmul. On the H200 a B=1 decode step of llama-3.2-1b is 782 nodes, 113
of them those transposes (``tools/h200/opcount.py``, reports/bench/cuda-sm90/
issue28-ba08d27/), and the step is bound by the host's per-node cost (docs/performance.md).
Here each Linear (and a tied embedding's ``as_linear`` head) keeps the transposed weight
as an array evaluated once: a view of the same buffer with the transposed strides, the
very array the per-call Transpose makes. The Matmul then reads the same buffer with the
same strides, so it is the same kernel on the same operands: the bits cannot change.
(CPU: ``tests/unit/test_pretransposed.py``, every logprob byte equal through the fast
path; the H200 probe that checks the same is ``tools/h200/pretranspose_probe.py``.)

``pretransposed_model(model)`` returns a shallow clone of the module tree
(``module_clone.py``: the same weight arrays). Subclasses of Linear (the fused q/k/v
members) are left as they are.
"""

from __future__ import annotations

import copy

import mlx.core as mx
from mlx import nn

from batchlab.engine.paths.fast.module_clone import cloned

PRETRANSPOSE_ENV = "BATCHLAB_FAST_PRETRANSPOSE"


class PretransposedLinear(nn.Linear):
    """``nn.Linear`` reading ``_wt``, its weight's transposed view made once."""

    def __call__(self, x: mx.array) -> mx.array:  # not gated: gpu only
        if "bias" in self:
            return mx.addmm(self["bias"], x, self["_wt"])
        return x @ self["_wt"]


class PretransposedEmbedding(nn.Embedding):
    """``nn.Embedding`` whose ``as_linear`` (a tied output head) reads ``_wt``."""

    def as_linear(self, x: mx.array) -> mx.array:  # not gated: gpu only
        return x @ self["_wt"]


def _with_transposed(module: nn.Module, cls: type) -> nn.Module:  # not gated: gpu only
    clone = copy.copy(module)  # a shallow copy: the same weight array
    clone.__class__ = cls
    wt = module.weight.T
    mx.eval(wt)  # the view, once: the Transpose node never enters a step's graph
    clone["_wt"] = wt  # '_' keys are no parameters (Module.valid_parameter_filter)
    return clone


def _swap(module: nn.Module) -> nn.Module | None:  # not gated: gpu only
    if type(module) is nn.Linear:
        return _with_transposed(module, PretransposedLinear)
    if type(module) is nn.Embedding:
        return _with_transposed(module, PretransposedEmbedding)
    return None


def pretransposed_model(model: nn.Module) -> nn.Module:  # not gated: gpu only
    """A clone of ``model`` whose Linear layers and Embedding heads use a transposed
    weight made once (the module docstring says why the bits are the same)."""
    return cloned(model, _swap)
