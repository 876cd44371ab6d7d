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
    """The model's tokenizer (mlx-lm's wrapper), or None where it has none that loads.

    transformers' AutoTokenizer also validates the model's config.json, and rejects some
    zoo configs that mlx-lm runs (gemma2-gqa's float ``query_pre_attn_scalar``); the
    tokenizer files themselves load fine, so that case reads them directly."""
    from mlx_lm.tokenizer_utils import TokenizerWrapper
    from transformers import PreTrainedTokenizerFast

    from batchlab.zoo.load import resolve

    try:
        return _tokenizer(model)
    except Exception:  # noqa: BLE001 - transformers raises many kinds; try the files
        path = resolve(model)
        if not (path / "tokenizer.json").is_file():
            return None
        return TokenizerWrapper(PreTrainedTokenizerFast.from_pretrained(path))
