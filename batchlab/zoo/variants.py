"""Zoo variants: a sliding-window zoo model with another window, named ``gemma3@w4``.

A matrix reaches a ring regime (a wrap after a few tokens, a join into a wrapped ring)
with a smaller window instead of longer prompts. The variant keeps the base model's
weights (they are seeded by the base name and the shapes do not depend on the window);
only config.json changes, so it gets its own cache directory and fingerprint.
"""

from __future__ import annotations

import dataclasses
import re

from batchlab.zoo.specs import ZOO, ZooSpec

_VARIANT = re.compile(r"^(?P<base>[A-Za-z0-9._+-]+)@w(?P<window>[0-9]+)$")


def variant_name(base: str, window: int) -> str:
    return f"{base}@w{window}"


def is_variant(name: str) -> bool:
    return bool(_VARIANT.match(name))


def base_name(name: str) -> str:
    """``gemma3@w4`` -> ``gemma3``; any other name unchanged."""
    match = _VARIANT.match(name)
    return match["base"] if match else name


def variant_spec(name: str) -> ZooSpec:
    match = _VARIANT.match(name)
    if not match:
        raise ValueError(f"{name!r} is not a zoo variant; write e.g. gemma3@w4")
    base, window = match["base"], int(match["window"])
    if base not in ZOO:
        raise ValueError(f"{name!r}: {base!r} is not a zoo model; zoo models: {', '.join(ZOO)}")
    spec = ZOO[base]
    if "sliding_window" not in spec.config:
        windowed = [n for n, s in ZOO.items() if "sliding_window" in s.config]
        raise ValueError(f"{name!r}: {base} has no sliding window; models with one: "
                         f"{', '.join(windowed)}")
    if window < 1:
        raise ValueError(f"{name!r}: the window must be >= 1")
    return dataclasses.replace(spec, config={**spec.config, "sliding_window": window})
