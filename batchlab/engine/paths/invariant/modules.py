"""Batch-invariant stand-ins for the model modules whose GPU kernels depend on the batch.

The invariant path's model clone (``rowblock.blocked_model(..., invariant_modules=True)``)
swaps these in; they compute what the original computes, in an order fixed per token:

- MoE experts (mlx-lm's ``SwitchGLU`` / ``SwitchMLP``): mlx-lm sorts the tokens by
  expert once ``indices.size >= 64`` and runs grouped GEMMs over each expert's tokens,
  so a token's product depends on which other tokens picked its expert (and on CUDA the
  sorted M = 1 gather is another kernel, a grouped GEMM). Here the tokens are never
  sorted: every (token, expert) product is its own M = 1 gather (``gather_mv`` on CUDA).
- depthwise causal convolutions (mamba2, lfm2, qwen3.5: ``nn.Conv1d`` with one group
  per channel): ``mx.conv1d`` picks its GPU algorithm by the batch's shape. Here the
  ``kernel_size`` taps are summed one after another in float32 by elementwise ops, whose
  result for an element depends on that element's inputs only.
"""

from __future__ import annotations

import copy

import mlx.core as mx
from mlx import nn
from mlx_lm.models.switch_layers import SwitchGLU, SwitchMLP


class UnsortedSwitchGLU(SwitchGLU):
    """SwitchGLU that never sorts its tokens by expert (see the module docstring)."""

    def __call__(self, x, indices) -> mx.array:
        x = mx.expand_dims(x, (-2, -3))
        indices = mx.stop_gradient(indices)
        up = self.up_proj(x, indices)
        gate = self.gate_proj(x, indices)
        return self.down_proj(self.activation(up, gate), indices).squeeze(-2)


class UnsortedSwitchMLP(SwitchMLP):
    """SwitchMLP that never sorts its tokens by expert."""

    def __call__(self, x, indices) -> mx.array:
        x = mx.expand_dims(x, (-2, -3))
        indices = mx.stop_gradient(indices)
        x = self.activation(self.fc1(x, indices))
        return self.fc2(x, indices).squeeze(-2)


class TapConv1d(nn.Module):
    """A depthwise ``nn.Conv1d`` (stride 1, dilation 1) as a sum of its taps in float32."""

    def __init__(self, conv: nn.Conv1d):
        super().__init__()
        self.weight = conv.weight  # (channels, kernel_size, 1): the same array
        if "bias" in conv:
            self.bias = conv.bias
        if conv.padding:  # not gated: no zoo module
            # every Conv1d in mlx-lm's model modules (0.32) is built with padding 0: the
            # causal convs pad on the left themselves, from their conv state
            raise NotImplementedError(
                f"the invariant path has no stand-in for a padded depthwise Conv1d "
                f"(padding={conv.padding}); no mlx-lm model builds one: run this model "
                f"on l1")
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        taps = self.weight.shape[1]
        steps = x.shape[1] - taps + 1
        w = self.weight[:, :, 0].astype(mx.float32)
        xs = x.astype(mx.float32)
        y = xs[:, 0:steps] * w[:, 0]
        for k in range(1, taps):
            y = y + xs[:, k : k + steps] * w[:, k]
        if "bias" in self:
            y = y + self.bias.astype(mx.float32)
        return y.astype(x.dtype)


def is_depthwise(conv: nn.Conv1d) -> bool:
    channels, _, per_group = conv.weight.shape
    return (per_group == 1 and conv.groups == channels and conv.stride == 1
            and conv.dilation == 1)


_UNSORTED = ((SwitchGLU, UnsortedSwitchGLU), (SwitchMLP, UnsortedSwitchMLP))


def invariant_module(value):
    """The stand-in for ``value``, or None where it has none (a shallow copy keeps the
    original's weights and children; the original is untouched)."""
    for original, stand_in in _UNSORTED:
        if isinstance(value, original) and not isinstance(value, stand_in):
            clone = copy.copy(value)
            clone.__class__ = stand_in
            return clone
    if isinstance(value, nn.Conv1d) and is_depthwise(value):
        return TapConv1d(value)
    return None
