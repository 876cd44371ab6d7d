"""The engine's per-row processor settings as mlx-lm's own processors (the oracle side)."""

from __future__ import annotations

from mlx_lm.sample_utils import make_logits_processors

from batchlab.engine.core.processors import ProcessorParams


def mlx_lm_processors(params: ProcessorParams) -> list:
    """``make_logits_processors`` with the same settings as ``params``."""
    return make_logits_processors(
        logit_bias=dict(params.logit_bias) or None,
        repetition_penalty=params.repetition_penalty or None,
        repetition_context_size=params.repetition_context_size,
        presence_penalty=params.presence_penalty or None,
        presence_context_size=params.presence_context_size,
        frequency_penalty=params.frequency_penalty or None,
        frequency_context_size=params.frequency_context_size,
    )
