"""Text prompts to ids with the model's own tokenizer (byte-level for the zoo)."""

from __future__ import annotations

import functools


@functools.cache
def _tokenizer(model: str):
    from mlx_lm.utils import load_tokenizer

    from batchlab.zoo.load import resolve

    return load_tokenizer(resolve(model))


def encode_text(model: str, text: str) -> list[int]:
    """Ids for ``text`` without special tokens, so a prompt is exactly its text."""
    return list(_tokenizer(model).encode(text, add_special_tokens=False))


def tokenizer_for(model: str):
    """The model's tokenizer (mlx-lm's wrapper), or None where the directory has none."""
    try:
        return _tokenizer(model)
    except (OSError, ValueError):
        return None
