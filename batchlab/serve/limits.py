"""How many tokens a request may hold: the model's context, ``--max-prompt-tokens``, and
``max_tokens`` (``--max-tokens`` when the request names none).

A prompt must leave room for one token: ``prompt < context``. A request that names
``max_tokens`` must fit whole (``prompt + max_tokens <= context``, else a 400 that gives
both numbers, OpenAI's ``context_length_exceeded``); one that names none gets
``--max-tokens``, lowered to what the context has left (as vLLM does). The context is
the model's ``max_position_embeddings`` (or its kin); a model without one (a pure SSM)
has no context check, only ``--max-prompt-tokens``.

    context 8192, prompt 9000                 -> 400: the prompt alone is over
    context 8192, prompt 8000, max_tokens 500 -> 400: 8500 tokens asked for
    context 8192, prompt 8000, none named     -> max_tokens = min(512, 192) = 192
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from batchlab.serve.errors import APIError

# where model configs keep their context length (HF names, outer and text_config)
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length",
                "seq_length", "max_seq_len", "n_ctx")


def model_context(model_dir: Path) -> int | None:
    """The context length in ``model_dir/config.json``, or None when it names none."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for where in (config, config.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            value = where.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenLimits:
    context: int | None  # the model's context window; None: none known
    max_prompt_tokens: int | None  # --max-prompt-tokens; None: the context alone
    default_max_tokens: int  # --max-tokens: a request that names none gets this

    def __post_init__(self):
        if self.default_max_tokens < 1:
            raise ValueError("--max-tokens must be >= 1")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError("--max-prompt-tokens must be >= 1")

    def max_tokens(self, prompt_tokens: int, requested: int | None, *, param: str) -> int:
        """The request's max_tokens for one prompt; APIError (400) if it cannot fit.
        ``param``: the prompt's field ("prompt" or "messages")."""
        cap = self.max_prompt_tokens
        if cap is not None and prompt_tokens > cap:
            raise APIError(400, f"this prompt has {prompt_tokens} tokens, over this "
                           f"server's --max-prompt-tokens of {cap}: shorten it", param=param,
                           code="context_length_exceeded")
        context = self.context
        if context is None:
            return requested or self.default_max_tokens
        if prompt_tokens >= context:
            raise APIError(400, f"This model's maximum context length is {context} tokens, "
                           f"and this prompt alone has {prompt_tokens}: shorten the "
                           f"{param} (it must leave room for at least one token)",
                           param=param, code="context_length_exceeded")
        if requested is None:
            return min(self.default_max_tokens, context - prompt_tokens)
        if prompt_tokens + requested > context:
            raise APIError(400, f"This model's maximum context length is {context} tokens. "
                           f"However, you requested {prompt_tokens + requested} tokens "
                           f"({prompt_tokens} in the {param}, {requested} in the "
                           f"completion): shorten the {param} or lower max_tokens",
                           param="max_tokens", code="context_length_exceeded")
        return requested
