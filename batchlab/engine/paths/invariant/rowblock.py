"""Row-blocked projections: every row of a matmul computed by a GEMM of a fixed M.

On a GPU a row's ``x @ W.T`` depends on the number of rows M only through the kernel
M selects (FACTS.md, "What varies with B on the H200": M = 1 is another kernel in most
shapes, some shapes switch again between small and large M; at a fixed M the other
rows' contents do not matter). So computing every projection in blocks of exactly
``rows`` rows (the input padded with zero rows to a multiple of ``rows``, split, each
block one product, the results concatenated and the padding cut) makes a row's result
the same at every B, for the row alone too. On the CPU backend the matmul is already
row-invariant across M, so the invariant path leaves the model as it is there.

``blocked_model(model, rows)`` returns a shallow clone of the module tree whose
Linear / QuantizedLinear layers and tied-embedding ``as_linear`` compute that way; the
weights are the same arrays (nothing is copied), and the original model is untouched
(other paths in the process keep using it). MoE experts and depthwise convolutions
are not blocked but swapped (``invariant_modules.py``); RoPE modules are wrapped so that
a large padded batch rotates in launches MLX's CUDA backend accepts (``ropesplit.py``).
"""

from __future__ import annotations

import copy

import mlx.core as mx
from mlx import nn

from batchlab.engine.paths.invariant.modules import invariant_module
from batchlab.engine.paths.invariant.ropesplit import RowSplitRope, is_rope


def blocked_rows(fn, x: mx.array, rows: int) -> mx.array:
    """``fn(x)`` computed ``rows`` rows at a time over the flattened leading axes of x.

    Not one padded GEMM for larger M: the H200 probe (tools/h200/gemm_floor_probe.py,
    docs/invariant.md) found three of the ten llama-3.2-1b / 3.1-8b projection shapes
    whose rows at M >= 128 differ from the same rows in 64-row blocks.

    An input whose M is already a whole block (the invariant path pads its decode batch:
    ``InvariantScheduler._decode_logprobs``) is neither padded nor cut: a reshape, the
    product and a reshape, as many ops as MLX's matmul makes of a 3-D input itself."""
    lead, k = x.shape[:-1], x.shape[-1]
    flat = x.reshape(-1, k)
    m = flat.shape[0]
    padded = -(-m // rows) * rows
    if padded != m:
        flat = mx.concatenate([flat, mx.zeros((padded - m, k), flat.dtype)])
    if padded == rows:
        out = fn(flat)
    else:
        out = mx.concatenate([fn(flat[i : i + rows]) for i in range(0, padded, rows)])
    if padded != m:
        out = out[:m]
    return out.reshape(*lead, out.shape[-1])


class _Blocked(nn.Module):
    """A frozen wrapper of ``inner`` that runs its products ``rows`` rows at a time."""

    def __init__(self, inner: nn.Module, rows: int):
        super().__init__()
        self.inner = inner
        self.rows = rows
        self.freeze()


class BlockedLinear(_Blocked):
    """A Linear or QuantizedLinear whose product runs ``rows`` rows at a time."""

    def __call__(self, x: mx.array) -> mx.array:
        return blocked_rows(self.inner, x, self.rows)


class BlockedEmbedding(_Blocked):
    """An Embedding whose ``as_linear`` (tied output head) runs ``rows`` rows at a time."""

    def __call__(self, x: mx.array) -> mx.array:
        return self.inner(x)

    def as_linear(self, x: mx.array) -> mx.array:
        return blocked_rows(self.inner.as_linear, x, self.rows)


def _blocked(value, rows: int, swap: bool):
    if isinstance(value, (nn.Linear, nn.QuantizedLinear)):
        return BlockedLinear(value, rows)
    if isinstance(value, (nn.Embedding, nn.QuantizedEmbedding)):
        return BlockedEmbedding(value, rows)
    if is_rope(value):  # a padded decode batch's RoPE in launches MLX can make
        return RowSplitRope(value)
    stand_in = invariant_module(value) if swap else None
    if stand_in is not None:
        return stand_in
    if isinstance(value, nn.Module):
        clone = copy.copy(value)  # a shallow copy: the same arrays, its own children
        for key, child in value.items():
            clone[key] = _blocked(child, rows, swap)
        return clone
    if isinstance(value, list):
        return [_blocked(v, rows, swap) for v in value]
    if isinstance(value, dict):  # not gated: config
        return {k: _blocked(v, rows, swap) for k, v in value.items()}
    return value


def blocked_model(model: nn.Module, rows: int, invariant_modules: bool = False) -> nn.Module:
    """A clone of ``model`` whose projections compute ``rows`` rows at a time, and with
    ``invariant_modules`` its MoE experts and depthwise convolutions swapped for the
    batch-invariant stand-ins of ``invariant_modules.py``."""
    if rows < 1:  # not gated: input
        raise ValueError(f"row block must be >= 1, got {rows}")
    return _blocked(model, rows, invariant_modules)
