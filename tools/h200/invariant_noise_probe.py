"""Is the invariant path's distance from mlx-lm on CUDA a bug or rounding? (issue 28)

The second judge found the invariant path 200-350x further (mean KL) from mlx-lm's batch
bits than mlx-lm is from itself across B (reports/invariant/cuda-sm90/second-judge-
b65-b129/). mlx-lm against itself runs the same kernels, so that control measures B, not
rounding. This probe measures each side against a high-precision reference instead:

1. attention, one decode query per row, random bf16 inputs with left padding: the row
   kernel (GQA and per-head), MLX's masked SDPA (what mlx-lm's batch caches call: they
   always pass a mask array), MLX's unmasked SDPA over each row's own keys, against
   float64 (numpy) on the same bf16 values;
2. the projections: 64-row blocks (the invariant path) and one GEMM of M rows (l1 / the
   oracle) against float64;
3. whole decode steps on the same prefilled KV: the model as mlx-lm's batch mode runs it
   (mask array), the invariant path's blocked model with the row kernel, and the model in
   float32 as the reference; per layer on the same inputs (the reference's hidden state
   rounded to bf16, the same KV), and teacher-forced over 8 steps (each variant keeps its
   own KV, so rounding compounds as in a cell): KL against the float32 reference.

    python3 tools/h200/invariant_noise_probe.py [models...]
"""

from __future__ import annotations

import sys

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map
from mlx_lm.models.cache import KVCache

from batchlab.engine.kernels import row_attention as ra
from batchlab.engine.kernels.attention_dispatch import install_dispatch
from batchlab.engine.paths.invariant.rowblock import blocked_model


def f64(x: mx.array) -> np.ndarray:
    return np.array(x.astype(mx.float32), dtype=np.float64)


def err_line(label: str, got: mx.array, ref: np.ndarray) -> str:
    g = f64(got)
    d = np.abs(g - ref)
    rounded = f64(mx.array(ref.astype(np.float32)).astype(got.dtype))
    exact = float(np.mean(g == rounded)) * 100
    rel = float(np.sqrt(np.mean(d**2)) / (np.sqrt(np.mean(ref**2)) + 1e-30))
    return (f"  {label:<34} max|err| {d.max():.3e}  mean|err| {d.mean():.3e}  rel RMS {rel:.3e}  "
            f"correctly rounded {exact:5.1f}%")


def attention_ops() -> None:
    print("== 1. decode attention, bf16 inputs, against float64")
    rng = np.random.default_rng(0)
    for hq, hkv, d, b, w in ((4, 2, 16, 16, 200), (32, 8, 64, 16, 600), (32, 8, 128, 16, 600)):
        q = mx.array(rng.standard_normal((b, hq, 1, d)) * 1.5).astype(mx.bfloat16)
        k = mx.array(rng.standard_normal((b, hkv, w, d)) * 1.5).astype(mx.bfloat16)
        v = mx.array(rng.standard_normal((b, hkv, w, d))).astype(mx.bfloat16)
        pads = rng.integers(0, w // 3, b)
        scale = d**-0.5
        qn, kn, vn = f64(q), f64(k), f64(v)
        ref = np.zeros((b, hq, 1, d))
        for r in range(b):
            for h in range(hq):
                kv = h // (hq // hkv)
                s = (qn[r, h, 0] * scale) @ kn[r, kv, pads[r]:].T
                p = np.exp(s - s.max())
                ref[r, h, 0] = (p / p.sum()) @ vn[r, kv, pads[r]:]
        first = mx.array(pads.astype(np.int32))
        mask = (mx.arange(w)[None] >= first[:, None])[:, None, None, :]
        print(f" heads {hq}/{hkv} dim {d} B {b} keys {w} (left padding 0..{w // 3})")
        saved = ra.GQA
        ra.GQA = True
        print(err_line("row kernel (GQA, the CUDA default)", ra.row_attention(q, k, v, first, scale), ref))
        ra.GQA = False
        print(err_line("row kernel (per head)", ra.row_attention(q, k, v, first, scale), ref))
        ra.GQA = saved
        print(err_line("MLX SDPA, mask array (mlx-lm batch)",
                       mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask), ref))
        alone = mx.concatenate([mx.fast.scaled_dot_product_attention(
            q[r:r + 1], k[r:r + 1, :, int(pads[r]):], v[r:r + 1, :, int(pads[r]):], scale=scale)
            for r in range(b)])
        print(err_line("MLX SDPA, row alone, no mask", alone, ref))


def gemm_ops() -> None:
    print("== 2. projections x @ W.T, bf16, against float64 (M = 129 rows)")
    rng = np.random.default_rng(1)
    for n, kdim in ((128, 64), (2048, 2048), (8192, 2048), (2048, 8192), (1024, 4096)):
        x = mx.array(rng.standard_normal((129, kdim))).astype(mx.bfloat16)
        wt = mx.array(rng.standard_normal((n, kdim)) * 0.02).astype(mx.bfloat16)
        ref = f64(x) @ f64(wt).T
        xp = mx.concatenate([x, mx.zeros((63, kdim), x.dtype)])
        blocked = mx.concatenate([xp[i:i + 64] @ wt.T for i in range(0, 192, 64)])[:129]
        alone = mx.concatenate([x[i:i + 1] @ wt.T for i in range(129)])
        print(f" W {n}x{kdim}")
        print(err_line("64-row blocks (invariant)", blocked, ref))
        print(err_line("one GEMM, M = 129 (l1, oracle)", x @ wt.T, ref))
        print(err_line("M = 1 per row (oracle B=1)", alone, ref))


class RowCache(KVCache):
    """A plain KVCache that the dispatch sends to the row kernel (no padding)."""

    attends_rows = True

    def first_keys(self) -> mx.array:
        return mx.zeros((self.keys.shape[0],), mx.int32)


def clone_caches(caches, cls, dtype):
    out = []
    for c in caches:
        n = cls()
        n.keys, n.values = c.keys.astype(dtype), c.values.astype(dtype)
        n.offset = c.offset
        out.append(n)
    mx.eval([(c.keys, c.values) for c in out])
    return out


def head(model, h):
    if getattr(model.args, "tie_word_embeddings", False) or "lm_head" not in model:
        return model.model.embed_tokens.as_linear(h)
    return model.lm_head(h)


def layer_inputs(model, tokens, caches, masked: bool):
    """A decode step through ``model`` with its own caches; returns the hidden state
    entering each layer (and the logits)."""
    h = model.model.embed_tokens(tokens)
    width = caches[0].offset + 1
    mask = mx.ones((tokens.shape[0], 1, 1, width), mx.bool_) if masked else None
    ins = []
    for layer, c in zip(model.model.layers, caches):
        ins.append(h)
        h = layer(h, mask, cache=c)
    return ins, head(model, model.model.norm(h))


def kl_stats(ref_logits: mx.array, logits: mx.array) -> tuple[float, float, float, float]:
    lp_r = ref_logits.astype(mx.float32)
    lp_r = lp_r - mx.logsumexp(lp_r, axis=-1, keepdims=True)
    lp = logits.astype(mx.float32)
    lp = lp - mx.logsumexp(lp, axis=-1, keepdims=True)
    kl = (mx.exp(lp_r) * (lp_r - lp)).sum(-1).reshape(-1)
    top = (mx.argmax(lp_r, -1) == mx.argmax(lp, -1)).reshape(-1)
    kl = np.array(kl)
    return float(kl.mean()), float(np.median(kl)), float(kl.max()), float(np.array(top).mean() * 100)


def model_probe(name: str, b: int = 64, prompt: int = 40, steps: int = 8) -> None:
    from batchlab.bench.shapes import build_shape, parse_shape_name
    from batchlab.zoo import load

    parsed = parse_shape_name(name)
    model = build_shape(*parsed) if parsed else load(name).model
    ref_model = type(model)(model.args)
    ref_model.update(tree_map(lambda p: p.astype(mx.float32), model.parameters()))
    ref_model.eval()
    mx.eval(ref_model.parameters())
    inv_model = blocked_model(model, 64, invariant_modules=True)
    install_dispatch()
    vocab = model.model.embed_tokens.weight.shape[0]
    rng = np.random.default_rng(2)
    tokens = mx.array(rng.integers(0, vocab, (b, prompt)).astype(np.int32))
    base = [KVCache() for _ in model.model.layers]
    model(tokens[:, :-1], cache=base)
    mx.eval([(c.keys, c.values) for c in base])
    print(f"== 3. {name}: B {b}, prompt {prompt}, {len(model.model.layers)} layers")
    # per layer, on the same inputs: the reference's hidden state, the same KV
    ref_c = clone_caches(base, KVCache, mx.float32)
    ins, _ = layer_inputs(ref_model, tokens[:, -1:], ref_c, masked=False)
    variants = (("oracle (mask array)", model, KVCache, True),
                ("invariant (blocks, row kernel)", inv_model, RowCache, False),
                ("fused SDPA (no mask)", model, KVCache, False))
    print(" per layer, one decode step on the reference's input rounded to bf16 and the same "
          "KV: rel RMS error against float32 of the attention block's output (o_proj, before "
          "the residual) | of the layer's output")
    for label, m, cls, masked in variants:
        attn_errs, out_errs = [], []
        for i, h in enumerate(ins):
            width = base[i].offset + 1
            mask = mx.ones((b, 1, 1, width), mx.bool_) if masked else None
            hb = h.astype(mx.bfloat16)
            h32 = hb.astype(mx.float32)
            rl, vl = ref_model.model.layers[i], m.model.layers[i]
            rc = clone_caches(base[i:i + 1], KVCache, mx.float32)
            vc = clone_caches(base[i:i + 1], cls, mx.bfloat16)
            want = f64(rl.self_attn(rl.input_layernorm(h32), None, cache=rc[0]))
            got = f64(vl.self_attn(vl.input_layernorm(hb), mask, cache=vc[0]))
            attn_errs.append(np.sqrt(np.mean((got - want) ** 2) / np.mean(want**2)))
            rc = clone_caches(base[i:i + 1], KVCache, mx.float32)
            vc = clone_caches(base[i:i + 1], cls, mx.bfloat16)
            want = f64(rl(h32, None, cache=rc[0]))
            got = f64(vl(hb, mask, cache=vc[0]))
            out_errs.append(np.sqrt(np.mean((got - want) ** 2) / np.mean(want**2)))
        print(f"  {label:<32} attention " + " ".join(f"{e:.2e}" for e in attn_errs)
              + " | layer " + " ".join(f"{e:.2e}" for e in out_errs))
    # teacher-forced steps, each variant on its own KV: KL against the float32 model
    caches = {"ref": clone_caches(base, KVCache, mx.float32)}
    for label, m, cls, masked in variants:
        caches[label] = clone_caches(base, cls, mx.bfloat16)
    logits = {k: [] for k in caches}
    tok = tokens[:, -1:]
    for _ in range(steps):
        _, ref_logits = layer_inputs(ref_model, tok, caches["ref"], masked=False)
        logits["ref"].append(ref_logits)
        for label, m, cls, masked in variants:
            logits[label].append(layer_inputs(m, tok, caches[label], masked)[1])
        tok = mx.argmax(ref_logits[:, -1:], axis=-1).astype(mx.int32)
        mx.eval(tok, *[v[-1] for v in logits.values()])
    print(f" {steps} teacher-forced steps x {b} rows: KL(float32 || variant) mean / median / max, "
          "same top-1")
    ref = mx.concatenate(logits["ref"], axis=1)
    cat = {k: mx.concatenate(v, axis=1) for k, v in logits.items()}
    for label, *_ in variants:
        mean, med, mx_, top = kl_stats(ref, cat[label])
        print(f"  {label:<32} {mean:.3e} / {med:.3e} / {mx_:.3e}  top-1 {top:.1f}%")
    mean, med, mx_, top = kl_stats(cat["oracle (mask array)"], cat["invariant (blocks, row kernel)"])
    print(f"  {'invariant vs oracle (the judge)':<32} {mean:.3e} / {med:.3e} / {mx_:.3e}  top-1 {top:.1f}%")


def main() -> None:
    attention_ops()
    gemm_ops()
    for name in sys.argv[1:] or ["llama", "llama-3.2-1b", "llama-3.1-8b@L8"]:
        try:
            model_probe(name)
        except Exception as exc:  # noqa: BLE001 - one model's failure must not hide the rest
            print(f"== 3. {name}: failed: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
