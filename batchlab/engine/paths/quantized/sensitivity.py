"""How much each attention layer's KV quantization moves the output, by KL.

For layer i alone quantized at the scheme's low ``bits`` (every other layer in the model
dtype), a teacher-forced run: the first ``context`` ids are prefilled in the model dtype,
the cache switches (start = ``context``), the next ``context`` ids go through in one
forward over the quantized cache. The score of layer i is the mean KL (nats) of those
positions' distributions against the all-bf16 run. ``kvmix`` gives its high bits to
the layers with the highest scores (``KVScheme.plan``).

The ids are deterministic (a fixed seed over the vocabulary), so the plan of a model is
the same in every process: the engine path and its oracle compute the same plan.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx import nn

from batchlab.engine.paths.quantized.kv import KVQuant

SENSITIVITY_CONTEXT = 32  # ids prefilled, then as many teacher-forced
# (id(model), bits, group) -> (model, scores); the model is held so its id is never reused
_MEMO: dict[tuple[int, int, int], tuple[nn.Module, list[float]]] = {}


def probe_ids(model: nn.Module, n: int, seed: int = 0) -> list[int]:
    vocab = model.args.vocab_size if hasattr(model, "args") else 256
    return np.random.default_rng(seed).integers(0, min(vocab, 256), size=2 * n).tolist()


def _logprobs(model: nn.Module, plan: list[KVQuant] | None, ids: list[int], n: int):
    from batchlab.engine.core.layers import make_batch_caches
    from batchlab.engine.paths.quantized.caches import quantized_caches

    caches = make_batch_caches(model, 1) if plan is None else quantized_caches(model, [0], plan)
    tokens = mx.array([ids])
    model(tokens[:, :n], cache=caches)
    logits = model(tokens[:, n:], cache=caches)[0].astype(mx.float32)
    return np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True), dtype=np.float64)


def layer_sensitivity(model: nn.Module, scheme, context: int = SENSITIVITY_CONTEXT) -> list[float]:
    """Mean KL per attention cache when only that one is quantized at ``scheme.bits``."""
    from batchlab.engine.paths.quantized.caches import count_attention_caches

    key = (id(model), scheme.bits, scheme.group_size)
    if key in _MEMO:
        return _MEMO[key][1]
    ids = probe_ids(model, context)
    ref = _logprobs(model, None, ids, context)
    never = KVQuant(bits=scheme.bits, group_size=scheme.group_size, start=10**9)
    scores = []
    for i in range(count_attention_caches(model)):
        plan = [never] * count_attention_caches(model)
        plan[i] = KVQuant(bits=scheme.bits, group_size=scheme.group_size, start=context)
        got = _logprobs(model, plan, ids, context)
        scores.append(float(np.mean(np.sum(np.exp(ref) * (ref - got), axis=-1))))
    _MEMO[key] = (model, scores)
    return scores
