"""A shallow clone of a model's module tree, for a path that swaps some of its modules.

The clone's modules are new objects holding the same arrays, so a path can change its
clone's modules (their class, a kept transposed view, a fused group) while the original
model, which the other paths and mlx-lm's engines in the process run, keeps its own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from mlx import nn


def cloned(value, swap: Callable[[nn.Module], nn.Module | None] = lambda _: None):
    """``value`` (a module, or a list or dict holding modules) with every module copied:
    a module that ``swap`` returns a replacement for becomes it, any other is a shallow
    copy whose children are cloned the same way; arrays are shared, never copied."""
    if isinstance(value, nn.Module):
        swapped = swap(value)
        if swapped is not None:  # not gated: gpu only (pretransposed.py, the one swap)
            return swapped
        clone = copy.copy(value)
        for key, child in value.items():
            clone[key] = cloned(child, swap)
        return clone
    if isinstance(value, list):
        return [cloned(v, swap) for v in value]
    if isinstance(value, dict):  # not gated: config
        return {k: cloned(v, swap) for k, v in value.items()}
    return value
