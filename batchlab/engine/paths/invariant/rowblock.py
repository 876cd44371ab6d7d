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

On CUDA a one-token forward (``decoding_by_rows()``: the scheduler's decode steps and a
joiner's first step) computes its projections with ``row_gemm.py`` instead, whose rows
do not depend on M at all: no block, no padding, about a GEMV's cost at B = 1. Prompts
are still prefilled by blocks; a token is prefilled or decoded the same way alone and in
any batch, so either kernel keeps a row's bits its own.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading

import mlx.core as mx
from mlx import nn

from batchlab.backend import on_cuda
from batchlab.engine.kernels import row_gemm
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


# BATCHLAB_INVARIANT_ROW_GEMM=0: decode by row blocks too (the path before the row
# kernel: the decode batch padded to a whole block), for an A/B on the H200
ROW_GEMM_ENV = "BATCHLAB_INVARIANT_ROW_GEMM"


class _Phase(threading.local):
    """Whether the forward this thread is building is a one-token step
    (``decoding_by_rows``), and the row groups it used (their cached products are
    dropped when it ends); per thread, as a server may build two schedulers' forwards
    at once."""

    decoding = False

    def __init__(self):
        self.groups: list = []


_PHASE = _Phase()


@contextlib.contextmanager
def decoding_by_rows():
    """Within: the model's one-token forward, whose projections run ``row_gemm`` where
    their wrapper ``decodes_by_rows``. MLX builds the graph as the model's Python runs,
    so the flag is read while the forward is called, not when it is evaluated."""
    before, _PHASE.decoding = _PHASE.decoding, True
    try:
        yield
    finally:
        _PHASE.decoding = before
        if not before:  # the outermost forward ends: no group keeps its input or product
            for group in _PHASE.groups:
                group.forget()  # not gated: gpu only
            _PHASE.groups.clear()


def row_kernel_available() -> bool:
    """The row GEMM runs on CUDA only (elsewhere the matmul is row-invariant already and
    the path keeps its blocks; ``invariant-blocked`` is the CPU's gate of them)."""
    return on_cuda() and os.environ.get(ROW_GEMM_ENV, "1") != "0"


def _decode_product(weight: mx.array, x: mx.array) -> mx.array:  # not gated: gpu only
    return row_gemm.row_gemm(x, weight)


def _group_product(weights: list[mx.array], x: mx.array) -> mx.array:  # not gated: gpu only
    return row_gemm.row_gemm_group(x, weights)


# BATCHLAB_ROW_GEMM_GROUPS=1 (opt-in: no gain at B = 1 in two rounds on the H200,
# docs/invariant.md, and a loss at 256 rows, where the slices are copied): a layer's q/k/v (and
# gate/up) take one row GEMM call for their shared input instead of one each. Every
# element keeps its bits (its arithmetic reads its own row and column only); what it
# saves is host time: at B = 1 each ``mx.fast.cuda_kernel`` call costs the invariant
# path's forward build ~9 us (MLX rebuilds the kernel's source per call), 113 calls a
# step on llama-3.2-1b against 65 grouped (reports/bench/cuda-sm90/issue28-row-gemm/).
ROW_GROUPS_ENV = "BATCHLAB_ROW_GEMM_GROUPS"
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def grouped_products() -> bool:
    """``ROW_GROUPS_ENV``: 1 groups, unset or 0 does not; anything else is refused."""
    value = os.environ.get(ROW_GROUPS_ENV, "0")
    if value not in ("0", "1"):  # not gated: input
        raise ValueError(f"{ROW_GROUPS_ENV}={value!r}: give 1 (q/k/v and gate/up one row "
                         f"GEMM call each) or 0 (one call a projection, the default)")
    return value == "1"


class _RowGroup:
    """The members of one group: their weights' product for the last input, computed
    once (mlx-lm's modules call ``q_proj(x), k_proj(x), v_proj(x)`` on the same array)."""

    def __init__(self, members: list):  # not gated: gpu only
        self.members = members  # their weights read at each call, as the single product's
        self._last: tuple[mx.array, mx.array] | None = None

    def product(self, x: mx.array) -> mx.array:  # not gated: gpu only
        last = self._last
        if last is None or last[0] is not x:
            last = self._last = (x, _group_product([m.inner.weight for m in self.members], x))
            _PHASE.groups.append(self)
        return last[1]

    def forget(self) -> None:  # not gated: gpu only
        self._last = None


def _group_projections(module: nn.Module) -> None:  # not gated: gpu only
    """Give the row-decoded projections of each of ``GROUPS`` found whole among
    ``module``'s children (one K and dtype) a shared ``_RowGroup`` and their columns."""
    for names in GROUPS:
        members = [module[n] for n in names if n in module]
        if (len(members) < len(names)
                or not all(isinstance(m, BlockedLinear) and m.decodes_by_rows for m in members)
                or len({(m.inner.weight.shape[1], m.inner.weight.dtype) for m in members}) > 1):
            continue
        group, start = _RowGroup(members), 0
        for member in members:
            stop = start + member.inner.weight.shape[0]
            object.__setattr__(member, "_group", (group, start, stop))  # not a child module
            start = stop


class _Blocked(nn.Module):
    """A frozen wrapper of ``inner`` that runs its products ``rows`` rows at a time, or
    (``decodes_by_rows``: an unquantized bf16 / fp16 weight where the row kernel runs)
    by the row kernel in one-token forwards."""

    def __init__(self, inner: nn.Module, rows: int):
        super().__init__()
        self.inner = inner
        self.rows = rows
        weight = getattr(inner, "weight", None)
        self.decodes_by_rows = (type(inner) in (nn.Linear, nn.Embedding) and weight is not None
                                and row_gemm.supports(weight) and row_kernel_available())
        self.freeze()

    def _by_rows(self, x: mx.array) -> bool:
        """A one-token forward's product by the row kernel (a choice made by the phase,
        the weight and the dtypes: the same at every M)."""
        return (_PHASE.decoding and self.decodes_by_rows
                and x.dtype == self.inner.weight.dtype)


class BlockedLinear(_Blocked):
    """A Linear or QuantizedLinear whose product runs ``rows`` rows at a time."""

    _group = None  # (its _RowGroup, first column, end column) where grouped

    def __call__(self, x: mx.array) -> mx.array:
        if self._by_rows(x):  # not gated: gpu only
            if self._group is None:
                y = _decode_product(self.inner.weight, x)
            else:
                group, start, stop = self._group
                y = group.product(x)[..., start:stop]
            return y + self.inner.bias if "bias" in self.inner else y
        return blocked_rows(self.inner, x, self.rows)


class BlockedEmbedding(_Blocked):
    """An Embedding whose ``as_linear`` (tied output head) runs ``rows`` rows at a time."""

    def __call__(self, x: mx.array) -> mx.array:
        return self.inner(x)

    def as_linear(self, x: mx.array) -> mx.array:
        if self._by_rows(x):  # not gated: gpu only
            return _decode_product(self.inner.weight, x)
        return blocked_rows(self.inner.as_linear, x, self.rows)


def decodes_all_by_rows(model: nn.Module) -> bool:
    """Whether every blocked projection of ``model`` runs the row kernel in a one-token
    forward: then nothing in it depends on the decode batch's M and the batch is not
    padded to a block."""
    wrapped = [m for m in model.modules() if isinstance(m, _Blocked)]
    return bool(wrapped) and all(m.decodes_by_rows for m in wrapped)


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
        if grouped_products():  # not gated: gpu only (opt-in)
            _group_projections(clone)
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
