"""How far the rounding of a fused residual add puts minicpm's logprobs apart: the control
for the compiled path's minicpm cells on the H200, which are not bit-exact there.

mlx-lm's minicpm adds each layer's scaled residual as ``x + r * s`` in bf16 (the product
rounded, then the sum); ``mx.compile`` on CUDA fuses that into one kernel, which rounds
once (docs/results.md). This runs the zoo minicpm as it is and with those two adds in
float32, rounded once, each against the model in float32, with the protocol of
``attention_rounding.py`` (B 16, prompt 40, 24 decode steps fed the float32 model's
greedy ids).

    PYTHONPATH=. python tools/probes/residual_rounding.py
"""

from __future__ import annotations

import copy

import mlx.core as mx
import numpy as np
from attention_rounding import ORIGINAL, run, stats  # its sibling: run as a script
from mlx.utils import tree_map
from mlx_lm.models import minicpm

from batchlab.zoo import load

AS_IS = minicpm.DecoderLayer.__call__


def rounded_once(self, x, mask=None, cache=None):
    """minicpm's decoder layer with each scaled residual add in float32, rounded once."""
    scale = self.scale_depth / self.num_hidden_layers**0.5
    r = self.self_attn(self.input_layernorm(x), mask, cache)
    h = (x.astype(mx.float32) + r.astype(mx.float32) * scale).astype(x.dtype)
    r = self.mlp(self.post_attention_layernorm(h))
    return (h.astype(mx.float32) + r.astype(mx.float32) * scale).astype(h.dtype)


def main() -> None:
    model = load("minicpm").model
    ref_model = copy.deepcopy(model)
    ref_model.update(tree_map(lambda p: p.astype(mx.float32), model.parameters()))
    ref_model.eval()
    rng = np.random.default_rng(3)
    tokens = mx.array(rng.integers(0, model.args.vocab_size, (16, 40)).astype(np.int32))
    ref, forced = run(ref_model, tokens, 24, ORIGINAL, None)
    as_is, _ = run(model, tokens, 24, ORIGINAL, forced)
    minicpm.DecoderLayer.__call__ = rounded_once
    try:
        fused, _ = run(model, tokens, 24, ORIGINAL, forced)
    finally:
        minicpm.DecoderLayer.__call__ = AS_IS
    print(f"minicpm as it is       vs float32 model: {stats(ref, as_is)}")
    print(f"residuals rounded once vs float32 model: {stats(ref, fused)}")
    print(f"the two against each other: {stats(as_is, fused)}", flush=True)


if __name__ == "__main__":
    main()
