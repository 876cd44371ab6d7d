"""Issue 28, item 3: the narrow k and v GEMMs of a B=256 decode step.

At llama-3.1-8b B=256 the k and v projections (N = 1024) run at 0.8 TB/s against the
q projection's 1.9 and gate/up's 2.8 (reports/bench/cuda-sm90/issue28-one-row/). Two
ways to fill the device without touching a kernel's arithmetic are tried:

- ``bits``: one GEMM through k's and v's weights side by side (N = 2048). cuBLASLt may
  pick another kernel for another N, and with it another order of the sums, so each row
  count is checked: the product's columns against the two GEMMs' outputs, byte for byte;
  then each form is timed at B=256.
- ``step``: the fast step, paired in one process (``paired.py``): ``as-is``, with the k/v
  product always fused as above (``kv-fused``), with q/k/v fused (``qkv-fused``,
  BATCHLAB_FAST_FUSE's GEMM), and with the k and v GEMMs queued on a second stream beside
  q's (``side-stream``, the same kernels, run side by side). s36b and s37 ran it with
  ``kv-off`` against ``as-is`` while the engine had a checked k|v GEMM (``kv_product.py``,
  ``BATCHLAB_FAST_KV``; 1ccb23b-18e4b24, removed since: reports/bench/cuda-sm90/issue28-kv/).
- ``rope``: the model's RoPE on keys sliced from a wider product (strided) against the
  same keys contiguous.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/kv_gemm_probe.py bits|step|rope [--model ...]
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from unittest import mock

import mlx.core as mx

from batchlab.bench.shapes import load_model
from batchlab.engine.paths.fast import flat_decode
from gqa_exact_probe import timed  # tools/h200, first on sys.path when run as a script
from paired import paired_steps

ROWS = (1, 2, 3, 4, 5, 7, 8, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 100, 127, 128, 129,
        160, 192, 200, 224, 255, 256)


def bits(dim: int, kv: int) -> None:
    mx.random.seed(0)
    wk = (mx.random.normal((kv, dim)) * 0.02).astype(mx.bfloat16)
    wv = (mx.random.normal((kv, dim)) * 0.02).astype(mx.bfloat16)
    wkv = mx.concatenate([wk, wv], axis=0)
    mx.eval(wk, wv, wkv)
    same = []
    for rows in ROWS:
        x = mx.random.normal((rows, dim)).astype(mx.bfloat16)
        both = x @ wkv.T
        k, v = x @ wk.T, x @ wv.T
        equal = mx.array_equal(both[:, :kv], k).item() and mx.array_equal(both[:, kv:], v).item()
        same.append(equal)
        print(f"D={dim} N={kv}+{kv} rows={rows}: {'SAME' if equal else 'DIFFER'}", flush=True)
    print(f"D={dim} N={kv}+{kv}: {sum(same)}/{len(same)} row counts SAME", flush=True)
    x = mx.random.normal((256, dim)).astype(mx.bfloat16)
    mx.eval(x)
    print(f"D={dim} rows=256: k and v GEMMs {timed(lambda: [x @ wk.T, x @ wv.T]):.1f} us, "
          f"one k|v GEMM {timed(lambda: x @ wkv.T):.1f} us", flush=True)


_KV_WEIGHTS: dict[int, mx.array] = {}
SIDE = None


def _kv_fused(attn, x):
    w = _KV_WEIGHTS.get(id(attn))
    if w is None:
        w = _KV_WEIGHTS[id(attn)] = mx.concatenate([attn.k_proj.weight, attn.v_proj.weight])
        mx.eval(w)
    n = attn.k_proj.weight.shape[0]
    kv = x @ w.T
    return kv[:, :n], kv[:, n:]


def _side_stream(attn, x):
    with mx.stream(SIDE):
        return attn.k_proj(x), attn.v_proj(x)


def _attention_with(kv_products):
    """``flat_decode._attention``'s many-row form with k's and v's products made by
    ``kv_products(attn, x)``."""

    def attention_layer(attn, x, mask, cache, attention, head_norms):
        rows = x.shape[0]
        k, v = kv_products(attn, x)
        queries = attn.q_proj(x).reshape(rows, attn.n_heads, 1, -1)
        keys = k.reshape(rows, attn.n_kv_heads, 1, -1)
        if head_norms:
            queries, keys = attn.q_norm(queries), attn.k_norm(keys)
        queries = attn.rope(queries, offset=cache.offset)
        keys = attn.rope(keys, offset=cache.offset)
        values = v.reshape(rows, attn.n_kv_heads, 1, -1)
        keys, values = cache.update_and_fetch(keys, values)
        output = attention(queries, keys, values, cache=cache, scale=attn.scale, mask=mask)
        return attn.o_proj(output.reshape(rows, -1))

    return attention_layer


def step(model: str, batch: int, rounds: int, names: list[str]) -> None:
    global SIDE
    SIDE = mx.new_stream(mx.default_device())
    forms = {"kv-fused": _attention_with(_kv_fused), "side-stream": _attention_with(_side_stream)}

    def variant(name: str) -> ExitStack:
        stack = ExitStack()
        fuse = "1" if name == "qkv-fused" else "0"
        stack.enter_context(mock.patch.dict("os.environ", {"BATCHLAB_FAST_FUSE": fuse}))
        if name in forms:
            stack.enter_context(mock.patch.object(flat_decode, "_attention", forms[name]))
        return stack

    paired_steps(model, batch, rounds, names, variant, label=" fast")


def rope(model: str) -> None:
    """The model's RoPE on keys sliced from a wider product (strided rows) against the
    same keys contiguous, at per-row offsets, byte for byte."""
    attn = load_model(model).model.model.layers[0].self_attn
    heads, dim = attn.n_kv_heads, attn.k_proj.weight.shape[0] // attn.n_kv_heads
    for rows in (2, 16, 64, 256):
        wide = mx.random.normal((rows, 2 * heads * dim), key=mx.random.key(rows))
        wide = wide.astype(mx.bfloat16)
        strided = wide[:, :heads * dim].reshape(rows, heads, 1, dim)
        packed = mx.contiguous(wide[:, :heads * dim]).reshape(rows, heads, 1, dim)
        offsets = mx.random.randint(0, 300, (rows,), key=mx.random.key(7)).astype(mx.int32)
        same = mx.array_equal(attn.rope(strided, offset=offsets),
                              attn.rope(packed, offset=offsets)).item()
        print(f"rope {model} rows={rows}: strided keys against contiguous: "
              f"{'SAME' if same else 'DIFFER'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("part", choices=("bits", "step", "rope"))
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="as-is,kv-fused,side-stream,qkv-fused")
    args = ap.parse_args()
    if args.part == "bits":
        bits(4096, 1024)  # llama-3.1-8b
        bits(2048, 512)  # llama-3.2-1b
    elif args.part == "rope":
        rope(args.model)
    else:
        step(args.model, args.batch, args.rounds, args.variants.split(","))


if __name__ == "__main__":
    main()
