"""RoPE over a padded decode batch in launches MLX's CUDA backend can make.

MLX 0.32's CUDA ``mx.fast.rope`` (``mlx/backend/cuda/rope.cu``) launches its kernel over
``(dims / 2, T, B * ceil(N / 4))`` threads (N: heads) with the block shape of
``get_block_dims_common`` (``mlx/backend/common/utils.cpp``), which spends a budget of
2^10 threads over the three axes without capping the z axis at CUDA's 64. With few
rotary dims the budget lands on z: at ``dims / 2 = 8`` (head dim 16) and B * ceil(N / 4)
>= 128 the block is (8, 1, 128), and the graph node is refused
(``cudaGraphAddKernelNode ... invalid argument``). The invariant path pads its decode
batch to a whole GEMM block, so a 256-row block reached it on every full-attention zoo
model at every B (issue 28: 8 of 28 B33 cells on the H200). Head dims 32 and up give a
block of at most 64 on z and never split.

``RowSplitRope`` wraps a model's RoPE module: where MLX's launch would be refused it
applies the rotation to slices of rows (each slice with its rows' offsets) and
concatenates them. RoPE is elementwise per (row, head, position, dim pair): a slice's
elements are computed by the same arithmetic as in the whole batch, so every bit is
unchanged (``tests/unit/test_ropesplit.py``, and on the H200 ``tools/h200/rope_launch_probe.py``).
"""

from __future__ import annotations

import math

import mlx.core as mx
from mlx import nn

CUDA_MAX_BLOCK_Z = 64  # cudaDevAttrMaxBlockDimZ on every CUDA device MLX supports
BLOCK_BUDGET_POW2 = 10  # get_block_dims_common's default: 2^10 threads a block


def mlx_block_dims(dim0: int, dim1: int, dim2: int) -> tuple[int, int, int]:
    """MLX's ``get_block_dims_common(dim0, dim1, dim2)`` (the same result at every input,
    written without its early exits): the axes take one power of two each in turn while
    they are at least twice it, until 2^10 threads."""
    pows = [0, 0, 0]
    total = 0
    grew = True
    while grew and total < BLOCK_BUDGET_POW2:
        grew = False
        for axis, dim in enumerate((dim0, dim1, dim2)):
            # MLX stops as soon as the budget is spent, mid-round too
            if total < BLOCK_BUDGET_POW2 and dim >= 1 << (pows[axis] + 1):
                pows[axis] += 1
                total += 1
                grew = True
    return (1 << pows[0], 1 << pows[1], 1 << pows[2])


def _launch_is_valid(rows: int, heads: int, length: int, half_dims: int) -> bool:
    # the single-token kernel (B = 1, T = 1) has a 2-D grid of (dims / 2, N): always valid
    if rows == 1 and length == 1:
        return True
    return mlx_block_dims(half_dims, length, rows * -(-heads // 4))[2] <= CUDA_MAX_BLOCK_Z


def rows_per_launch(rows: int, heads: int, length: int, half_dims: int) -> int:
    """The most rows (<= ``rows``) one MLX RoPE launch takes over (rows, heads, length,
    2 * half_dims) without a block z past 64. Below 128 on z the block's z is at most
    64 whatever the other axes, so a slice of ``127 // ceil(heads / 4)`` rows always is."""
    # only the H200's padded decode batches (>= 128 rows at head dim 16) reach the split:
    # the CPU cells' batches stay under it (tests/unit/test_ropesplit.py splits on the CPU)
    if not _launch_is_valid(rows, heads, length, half_dims):  # not gated: gpu only
        most = 127 // -(-heads // 4)
        if most < 1:  # no zoo or real model has 512 heads
            raise ValueError(f"RoPE over {heads} heads of {2 * half_dims} rotary dims is one "
                             "launch MLX's CUDA backend refuses even for one row; use path l1")
        return most
    return rows


class RowSplitRope(nn.Module):
    """A frozen wrapper of a model's RoPE module (``inner``) that rotates slices of rows
    where MLX's CUDA launch over the whole batch would be refused (module docstring)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.freeze()

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        # MLX's rope reads x as (B, N..., T, D): rows first, positions and dims last
        rows, length, width = x.shape[0], x.shape[-2], x.shape[-1]
        heads = math.prod(x.shape[1:-2])
        most = rows_per_launch(rows, heads, length, getattr(self.inner, "dims", width) // 2)
        if most < rows:  # not gated: gpu only (rows_per_launch says why)
            return self._in_slices(x, offset, most)
        return self.inner(x, offset=offset)

    def _in_slices(self, x: mx.array, offset, most: int) -> mx.array:  # not gated: gpu only
        rows = x.shape[0]
        per_row = isinstance(offset, mx.array) and offset.ndim == 1 and offset.size == rows
        parts = []
        for start in range(0, rows, most):
            stop = min(start + most, rows)
            part_offset = offset[start:stop] if per_row else offset
            parts.append(self.inner(x[start:stop], offset=part_offset))
        return mx.concatenate(parts)


def is_rope(value) -> bool:
    """Whether ``value`` is a RoPE module of mlx-lm's kind (``nn.RoPE``, rope_utils'
    Llama3RoPE / YarnRoPE / SuScaledRoPE / ..., a model's own ``*RoPE`` class): called as
    ``rope(x, offset=...)`` on (B, N, T, D)."""
    return isinstance(value, nn.RoPE) or (
        isinstance(value, nn.Module) and type(value).__name__.endswith("RoPE"))
