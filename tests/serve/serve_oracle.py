"""What the server must answer for a greedy request: mlx-lm's BatchGenerator run alone."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.generate import BatchGenerator

from batchlab.zoo import load


def oracle_greedy(model: str, prompt: list[int], max_tokens: int):
    """(tokens, each token's logprob, each step's (V,) float32 logprobs), no stop tokens
    (the server is asked for ``stop_token_ids: []`` to match)."""
    generator = BatchGenerator(load(model).model, max_tokens=max_tokens)
    try:
        generator.insert([prompt], max_tokens=[max_tokens])
        tokens, rows = [], []
        while len(tokens) < max_tokens:
            for response in generator.next()[1]:
                tokens.append(response.token)
                rows.append(response.logprobs.astype(mx.float32))
    finally:
        generator.close()
    return tokens, [r[t].item() for r, t in zip(rows, tokens)], rows
