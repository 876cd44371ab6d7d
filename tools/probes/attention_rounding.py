"""How far two correct bf16 attentions put a zoo model's logprobs apart: mlx-lm's (MLX's
masked SDPA: bf16 scores and probabilities) against one that keeps scores and sums in
float32 (the invariant path's CUDA row kernel), each against the model in float32.

On the H200, MLX's masked SDPA gave the same bits as on this CPU in
tools/h200/invariant_noise_probe.py (max |err| 2.604e-02, 28.6% correctly rounded at
dim 16 on both), and the row kernel's output was the float32 result rounded once. So
this CPU run stands in for the GPU pair on models the GPU probe did not reach (sliding
windows): the model runs with mlx-lm's own caches (rings included), once as it is, once
with its attention calls replaced by the float32 form over the same mask, and once with
float32 weights; prefill, then decode steps fed the float32 model's greedy ids.

    PYTHONPATH=. python tools/probes/attention_rounding.py [zoo models...]
"""

from __future__ import annotations

import copy
import sys

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map
from mlx_lm.models import base
from mlx_lm.models.cache import make_prompt_cache

from batchlab.zoo import load

ORIGINAL = base.scaled_dot_product_attention


def precise(queries, keys, values, cache, scale, mask, sinks=None):
    """softmax in float32 over float32 scores, one rounding to the model dtype at the end."""
    if sinks is not None or isinstance(keys, tuple):
        return ORIGINAL(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)
    dtype = queries.dtype
    q, k, v = (t.astype(mx.float32) for t in (queries, keys, values))
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = mx.repeat(k, group, axis=1), mx.repeat(v, group, axis=1)
    s = (q * scale) @ k.swapaxes(-1, -2)
    if isinstance(mask, str):
        n, w = s.shape[-2:]
        mask = mx.arange(w)[None] <= (mx.arange(n) + w - n)[:, None]
    if mask is not None:
        s = mx.where(mask, s, -mx.inf) if mask.dtype == mx.bool_ else s + mask
    return (mx.softmax(s, axis=-1) @ v).astype(dtype)


def patch(fn) -> None:
    for name, module in list(sys.modules.items()):
        if name.startswith("mlx_lm.models.") and module is not None:
            if getattr(module, "scaled_dot_product_attention", None) in (ORIGINAL, precise):
                module.scaled_dot_product_attention = fn


def run(model, tokens, steps: int, fn, forced: mx.array | None) -> tuple[mx.array, mx.array]:
    """Logprobs of a prefill and ``steps`` decode steps fed ``forced`` (None: greedy,
    the ids returned for the next runs)."""
    patch(fn)
    cache = make_prompt_cache(model)
    logits = [model(tokens, cache=cache)[:, -1:]]
    fed = []
    for i in range(steps):
        tok = mx.argmax(logits[-1], axis=-1) if forced is None else forced[:, i:i + 1]
        fed.append(tok)
        logits.append(model(tok, cache=cache))
    patch(ORIGINAL)
    forced = mx.concatenate(fed, axis=1) if forced is None else forced
    out = mx.concatenate(logits, axis=1).astype(mx.float32)
    return out - mx.logsumexp(out, axis=-1, keepdims=True), forced


def stats(ref: mx.array, got: mx.array) -> str:
    kl = np.array((mx.exp(ref) * (ref - got)).sum(-1)).reshape(-1)
    top = np.array(mx.argmax(ref, -1) == mx.argmax(got, -1)).reshape(-1).mean() * 100
    return f"KL mean {kl.mean():.2e} median {np.median(kl):.2e} max {kl.max():.2e} top-1 {top:.1f}%"


def main() -> None:
    for name in sys.argv[1:] or ["llama", "gemma3", "gemma4-12b"]:
        model = load(name).model
        ref_model = copy.deepcopy(model)  # not type(model)(args): a tied head stays tied
        ref_model.update(tree_map(lambda p: p.astype(mx.float32), model.parameters()))
        ref_model.eval()
        rng = np.random.default_rng(3)
        vocab = model.args.vocab_size
        b, prompt, steps = 16, 40, 24
        tokens = mx.array(rng.integers(0, vocab, (b, prompt)).astype(np.int32))
        ref, forced = run(ref_model, tokens, steps, ORIGINAL, None)  # its greedy ids
        mlx, _ = run(model, tokens, steps, ORIGINAL, forced)
        f32, _ = run(model, tokens, steps, precise, forced)
        print(f"{name}: B {b}, prompt {prompt}, {steps} steps fed the float32 model's greedy ids")
        print(f"  mlx-lm's attention (bf16 scores)  vs float32 model: {stats(ref, mlx)}")
        print(f"  float32 attention (row kernel)    vs float32 model: {stats(ref, f32)}")
        print(f"  the two against each other (the second judge): {stats(mlx, f32)}", flush=True)


if __name__ == "__main__":
    main()
