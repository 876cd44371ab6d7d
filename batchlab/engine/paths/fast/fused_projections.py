"""One GEMM where a layer makes several projections of one input (``fast``).

Two groups: q/k/v and gate/up. Their weights are concatenated once, along the output
dim, and inside ``fused(groups)`` a group's first member called on an input computes the
whole product; the others slice their columns of it (the same input array object:
mlx-lm's modules call ``q_proj(x), k_proj(x), v_proj(x)`` and ``gate_proj(x),
up_proj(x)``). ``fast`` runs a clone of the model with its members swapped
(``fused_model``, once per model; ``module_clone.py``), so the original, which l1 and
mlx-lm's engines in the process run, keeps its plain ``nn.Linear`` layers; outside
``fused()`` a member is its plain ``nn.Linear`` too (fast's prefill).

``fast`` uses them in two places:

- **One row** (``ONE_ROW_GROUPS``, where ``one_row_products_exact``): a decode step of a
  single row is bound by the host, which encodes and launches every kernel, and one
  product of a row is a matrix-vector product. MLX's CUDA one (``gemv.cu``) sums each
  output over its own weight row, in an order set by K alone, and the CPU's product is
  row- and column-invariant, so the group's product gives every member's bits (the CPU's
  ``fast`` cells check that against the oracle). Biased groups stay apart: a bias goes
  through ``addmm``, whose kernel this does not cover. Metal picks its vector kernel's
  tiling by the output's length, so it is left out.
- **Many rows** (``BATCHLAB_FAST_FUSE=1``, CUDA, q/k/v only): at llama-3.1-8b B=256 on
  the H200 the k and v GEMMs (N = 1024) are too narrow to fill the device, and one q/k/v
  GEMM (N = 6144) takes less time than the three
  (reports/bench/cuda-sm90/issue28-59cea15/); gate/up's N = 28672 took longer than the
  pair. A wider GEMM may split its reduction differently, so this is not l1's rounding:
  it is opt-in, where ``fast`` is judged by KL against the oracle.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import mlx.core as mx
from mlx import nn

from batchlab.backend import on_cuda
from batchlab.engine.paths.fast.module_clone import cloned

QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")
GROUPS = (QKV, GATE_UP)
ONE_ROW_GROUPS = frozenset(GROUPS)
# (groups, biased too) of each fast decode forward in flight on this thread, innermost last
_ACTIVE: list[tuple[frozenset, bool]] = []
# each model's fused clone, kept while the model lives: (the model, weakly; its clone)
_CLONES: dict[int, tuple[weakref.ref, nn.Module]] = {}


def one_row_products_exact() -> bool:
    """Whether a one-row product through a group's weights gives each member's bits on
    the default device (CUDA and the CPU; the module docstring says why)."""
    return on_cuda() or mx.default_device() == mx.cpu


@contextmanager
def fused(groups=frozenset((QKV,)), biased: bool = True) -> Iterator[None]:
    """Within this block the fused members of ``groups`` (with a bias only if ``biased``)
    compute their group's product once per input."""
    _ACTIVE.append((frozenset(groups), biased))
    try:
        yield
    finally:
        _ACTIVE.pop()


def columns(member: nn.Module, x: mx.array, first: int, last: int) -> mx.array | None:
    """Members ``first`` to ``last`` of ``member``'s group, side by side as one slice of
    the group's product of ``x``, when the group is fused and active; else ``None``."""
    if not isinstance(member, FusedMemberLinear) or not member._active():
        return None
    group = member._fused_group
    return group.product(x)[..., group.ranges[first][0]:group.ranges[last][1]]


class _Group:
    """A group's concatenated weight (and bias), the column ranges of its members, and
    the last input it was called on with its parts."""

    def __init__(self, names: tuple[str, ...], members: list[nn.Linear]):
        self.names = names
        self.weight = mx.concatenate([m.weight for m in members], axis=0)
        has_bias = "bias" in members[0]
        self.bias = mx.concatenate([m.bias for m in members]) if has_bias else None
        ends, total = [], 0
        for m in members:
            total += m.weight.shape[0]
            ends.append(total)
        self.ranges = list(zip([0, *ends[:-1]], ends, strict=True))
        self.last_x = None
        self.last_product = None
        self.last_parts: list[mx.array] = []

    def product(self, x: mx.array) -> mx.array:
        """The group's product of ``x``, made once per input array."""
        if x is not self.last_x:
            if self.bias is not None:  # not gated: gpu only (FUSE=1 on a biased model)
                y = mx.addmm(self.bias, x, self.weight.T)
            else:
                y = x @ self.weight.T
            self.last_x, self.last_product = x, y
            self.last_parts = [y[..., a:b] for a, b in self.ranges]
        return self.last_product

    def part(self, x: mx.array, index: int) -> mx.array:
        self.product(x)
        return self.last_parts[index]


class FusedMemberLinear(nn.Linear):
    """An ``nn.Linear`` that, inside ``fused()``, reads its columns of its group's product."""

    def __call__(self, x: mx.array) -> mx.array:
        if not self._active():
            return super().__call__(x)
        return self._fused_group.part(x, self._fused_index)

    def _active(self) -> bool:
        if not _ACTIVE:
            return False
        groups, biased = _ACTIVE[-1]
        group = self._fused_group
        return group.names in groups and (biased or group.bias is None)


def _fusable(members: list) -> bool:
    if any(type(m) is not nn.Linear for m in members):
        return False  # quantized, already fused, or another module
    first = members[0]
    return all(m.weight.shape[1] == first.weight.shape[1] and m.weight.dtype == first.weight.dtype
               and ("bias" in m) == ("bias" in first) for m in members)


def fuse_projections(model: nn.Module) -> int:
    """Swap in fused members for every q/k/v and gate/up group of plain ``nn.Linear``
    layers of ``model``; returns the number of groups fused. A second call fuses nothing:
    fused members are no longer plain ``nn.Linear`` (``_fusable``)."""
    count = 0
    for _, module in model.named_modules():
        for names in GROUPS:
            members = [getattr(module, n, None) for n in names]
            if any(m is None for m in members) or not _fusable(members):
                continue
            group = _Group(names, members)
            mx.eval(group.weight, *([group.bias] if group.bias is not None else []))
            for i, m in enumerate(members):
                m.__class__ = FusedMemberLinear
                m._fused_group, m._fused_index = group, i
            count += 1
    return count


def fused_model(model: nn.Module) -> nn.Module:
    """A clone of ``model`` with every group fused (``fuse_projections``), the same one
    for each call while ``model`` lives: the concatenated weights are made once."""
    entry = _CLONES.get(id(model))
    if entry is not None and entry[0]() is model:
        return entry[1]
    clone = cloned(model)
    fuse_projections(clone)
    key = id(model)
    _CLONES[key] = (weakref.ref(model, lambda _: _CLONES.pop(key, None)), clone)
    return clone
