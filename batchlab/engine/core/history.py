"""Prompt-cache history: what a row brings when it joins with a cache, and how one is made.

A ``History`` is one row's single-row caches (mlx-lm's own classes, one per layer, as
``extract`` returns them and ``merge`` takes them) and the tokens those caches hold, in
order: mlx-lm's ``insert(..., caches=, all_tokens=)`` pair, and what
``remove(..., return_prompt_caches=True)`` hands back. A row that joins with a history
prefills only its new prompt on top of it; its processors see the history's tokens too.

``prefix_history`` builds one from a prompt alone, the single-stream way (a cached
system prompt): fresh caches, then the forward in chunks of ``step_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx import nn

from batchlab.engine.core import layers


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    caches: list  # one single-row mlx-lm cache per layer
    tokens: tuple[int, ...]  # the ids the caches hold, oldest first


def prefix_history(model: nn.Module, prefix: tuple[int, ...], step_size: int) -> History:
    """The caches after a B=1 forward over every id of ``prefix`` (nothing sampled)."""
    if not prefix:  # not gated: input
        raise ValueError("a prefix history needs at least one token")
    caches = layers.single_caches(model)
    tokens = mx.array([list(prefix)])
    while tokens.shape[1] > 0:
        model(tokens[:, :step_size], cache=caches)
        mx.eval([c.state for c in caches])
        tokens = tokens[:, step_size:]
    return History(caches=caches, tokens=tuple(prefix))


def fresh_history(model: nn.Module) -> History:
    """What a row that never ran holds: empty caches, no tokens."""
    return History(caches=layers.single_caches(model), tokens=())
