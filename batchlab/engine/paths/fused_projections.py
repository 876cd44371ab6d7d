"""One GEMM where a layer makes several projections of one input: q/k/v (``fast``, CUDA).

At llama-3.1-8b B=256 on the H200 the k and v GEMMs (N = 1024) are too narrow to fill
the device; one q/k/v GEMM (N = 6144) takes less time than the three
(reports/bench/cuda-sm90/issue28-59cea15/). gate/up is not fused: there the two GEMMs
of N = 14336 already fill it, and the one of N = 28672 took longer than the pair.
The weights of a group are concatenated once, along the output dim, and inside
``fused()`` the group's first member called on an input computes the whole product;
the others slice their columns of it (the same input array object: mlx-lm's attention
calls ``q_proj(x), k_proj(x), v_proj(x)``).

Outside ``fused()`` every member is its plain ``nn.Linear`` (the class is swapped for a
subclass, parameters untouched), so l1, mlx-lm's engines and prefill running the same
model in the same process are unchanged. A wider GEMM may split its reduction
differently, so this is not l1's rounding: only ``fast`` on CUDA uses it, where that
path is judged by KL against the oracle.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import mlx.core as mx
from mlx import nn

GROUPS = (("q_proj", "k_proj", "v_proj"),)
_ACTIVE = [0]  # fast decode forwards in flight on this thread (nesting-safe)
_FUSED_MODELS: dict[int, weakref.ref] = {}


@contextmanager
def fused() -> Iterator[None]:  # not gated: gpu only
    """Within this block fused members compute their group's product once per input."""
    _ACTIVE[0] += 1
    try:
        yield
    finally:
        _ACTIVE[0] -= 1


class _Group:
    """A group's concatenated weight (and bias), the column ranges of its members, and
    the last input it was called on with its parts."""

    def __init__(self, members: list[nn.Linear]):  # not gated: gpu only
        self.weight = mx.concatenate([m.weight for m in members], axis=0)
        has_bias = "bias" in members[0]
        self.bias = mx.concatenate([m.bias for m in members]) if has_bias else None
        ends, total = [], 0
        for m in members:
            total += m.weight.shape[0]
            ends.append(total)
        self.ranges = list(zip([0, *ends[:-1]], ends, strict=True))
        self.last_x = None
        self.last_parts: list[mx.array] = []

    def part(self, x: mx.array, index: int) -> mx.array:  # not gated: gpu only
        if x is not self.last_x:
            if self.bias is not None:
                y = mx.addmm(self.bias, x, self.weight.T)
            else:
                y = x @ self.weight.T
            self.last_x = x
            self.last_parts = [y[..., a:b] for a, b in self.ranges]
        return self.last_parts[index]


class FusedMemberLinear(nn.Linear):
    """An ``nn.Linear`` that, inside ``fused()``, reads its columns of its group's product."""

    def __call__(self, x: mx.array) -> mx.array:  # not gated: gpu only
        if not _ACTIVE[0]:
            return super().__call__(x)
        return self._fused_group.part(x, self._fused_index)


def _fusable(members: list) -> bool:  # not gated: gpu only
    if any(type(m) is not nn.Linear for m in members):
        return False  # quantized, already fused, or another module
    first = members[0]
    return all(m.weight.shape[1] == first.weight.shape[1] and m.weight.dtype == first.weight.dtype
               and ("bias" in m) == ("bias" in first) for m in members)


def fuse_projections(model: nn.Module) -> int:  # not gated: gpu only
    """Swap in fused members for every q/k/v group of plain ``nn.Linear``
    layers of ``model`` (once per model); returns the number of groups fused."""
    ref = _FUSED_MODELS.get(id(model))
    if ref is not None and ref() is model:
        return 0
    count = 0
    for _, module in model.named_modules():
        for names in GROUPS:
            members = [getattr(module, n, None) for n in names]
            if any(m is None for m in members) or not _fusable(members):
                continue
            group = _Group(members)
            mx.eval(group.weight, *([group.bias] if group.bias is not None else []))
            for i, m in enumerate(members):
                m.__class__ = FusedMemberLinear
                m._fused_group, m._fused_index = group, i
            count += 1
    key = id(model)
    _FUSED_MODELS[key] = weakref.ref(model, lambda _: _FUSED_MODELS.pop(key, None))
    return count
