"""Issue 28, item 2: ``row_chain``'s kernels (fast's one-row step as four kernels a layer,
``BATCHLAB_FAST_CHAIN=1``) on the H200: accurate, repeatable, faster?

Part ``kernels``: per shape (llama-3.2-1b, qwen3-0.6b, llama-3.1-8b, and the CUDA zoo's
llama-hd64 and qwen3-hd128), layer 0's weights and a random hidden state: each kernel's
largest error against the same chain in float32 (weights and input upcast), beside the
error of MLX's own ops in the model's dtype (rms_norm, the products, RoPE, the adds,
silu * up) against that reference. ``CHAIN ACCURATE yes`` where every kernel's error is
at most twice MLX's (plus 1e-6) at every shape; ``CHAIN REPEAT yes`` where five calls
gave the same bytes.

Part ``time``: us a call of each kernel against the MLX ops it replaces (llama-3.2-1b and
qwen3-0.6b's layer 0), with the bytes of weights a call reads and the rate.

Part ``fast``: fast's scheduler at B = 1 (llama-3.2-1b and qwen3-0.6b at three layers,
random weights, greedy, 300 steps, a ragged join halfway so the row that is left is
padded and masked), the chain against fast without it: the share of equal top-1 tokens,
the largest KL while the tokens agree, and the chain run twice (``CHAIN FAST REPEAT``).

Part ``slices`` (not in ``all``; for Nsight Compute, s45-chain.sh 5): each kernel at every
slice count, five calls each.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/chain_probe.py [kernels|time|fast|slices|all]
"""

from __future__ import annotations

import os
import sys

import mlx.core as mx

from batchlab.engine.kernels import row_chain as rc

sys.path.insert(0, "tools/h200")
from gqa_exact_probe import F32, run_fast, timed
from tiled_probe import against

SHAPES = ("llama-3.2-1b@L1", "qwen3-0.6b@L1", "llama-3.1-8b@L1", "llama-hd64",
          "qwen3-hd128")


def layer_inputs(name: str):
    from batchlab.bench.shapes import load_model

    model = load_model(name).model
    layer = model.model.layers[0]
    dim = layer.self_attn.q_proj.weight.shape[1]
    mx.random.seed(11)
    h = (mx.random.normal((1, dim)) * 2.0).astype(layer.input_layernorm.weight.dtype)
    return model, layer, h


def up(x):
    return x.astype(F32)


def references(layer, h, a, h2, act, rope: bool, offset: int, cast) -> dict:
    """What each kernel computes, every op in ``cast``'s dtype: float32 for the reference,
    the model's for MLX's own ops. ``a``, ``h2``, ``act``: the o, down and MLP inputs."""
    attn, mlp = layer.self_attn, layer.mlp
    n_q, n_kv = attn.n_heads, attn.n_kv_heads
    dim = attn.q_proj.weight.shape[0] // n_q
    norm, post = layer.input_layernorm, layer.post_attention_layernorm
    xn = mx.fast.rms_norm(cast(h), cast(norm.weight), norm.eps)
    q = (xn @ cast(attn.q_proj.weight).T).reshape(1, n_q, 1, dim)
    k = (xn @ cast(attn.k_proj.weight).T).reshape(1, n_kv, 1, dim)
    v = (xn @ cast(attn.v_proj.weight).T).reshape(1, n_kv, 1, dim)
    if rope:
        q, k = attn.rope(q, offset=offset), attn.rope(k, offset=offset)
    xn2 = mx.fast.rms_norm(cast(h2), cast(post.weight), post.eps)
    g, u = xn2 @ cast(mlp.gate_proj.weight).T, xn2 @ cast(mlp.up_proj.weight).T
    return {"q": q, "k": k, "v": v, "o": cast(h) + cast(a) @ cast(attn.o_proj.weight).T,
            "swiglu": (g * mx.sigmoid(g)) * u,
            "down": cast(h2) + cast(act) @ cast(mlp.down_proj.weight).T}


def chain_outputs(chain, layer, h, a, h2, act, rope: bool, offset: mx.array) -> dict:
    attn, mlp = layer.self_attn, layer.mlp
    shape = chain.layers[0]
    q, k, v = rc.norm_qkv(h, layer.input_layernorm.weight, shape.input_eps,
                          attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight,
                          shape.heads,
                          rc.rotation(offset, chain.inv_freq) if rope else None)
    return {"q": q, "k": k, "v": v,
            "o": rc.residual_product(h, attn.o_proj.weight, a),
            "swiglu": rc.norm_swiglu(h2, layer.post_attention_layernorm.weight,
                                     shape.post_eps, mlp.gate_proj.weight,
                                     mlp.up_proj.weight),
            "down": rc.residual_product(h2, mlp.down_proj.weight, act)}


def err(out, ref) -> float:
    return float(mx.abs(up(out) - ref).max().item())


def kernels_part() -> bool:
    from batchlab.engine.paths.fast.chain_decode import RowChain

    accurate = repeat = True
    for name in SHAPES:
        model, layer, h = layer_inputs(name)
        chain = RowChain(model)
        rope = chain.inv_freq is not None
        n_q, _, dim = chain.layers[0].heads
        width = layer.mlp.gate_proj.weight.shape[0]
        a = mx.random.normal((1, n_q * dim)).astype(h.dtype)
        h2 = (mx.random.normal(h.shape) * 2.0).astype(h.dtype)
        act = (mx.random.normal((1, width)) * 0.5).astype(h.dtype)
        offset = 77
        ref = references(layer, h, a, h2, act, rope, offset, up)
        mlx_ops = references(layer, h, a, h2, act, rope, offset, lambda t: t)
        where = mx.array([offset], dtype=mx.int32)
        ours = chain_outputs(chain, layer, h, a, h2, act, rope, where)
        line = []
        for key in ours:
            e_ours, e_mlx = err(ours[key], ref[key]), err(mlx_ops[key], ref[key])
            ok = e_ours <= 2 * e_mlx + 1e-6
            accurate &= ok
            line.append(f"{key} {e_ours:.3g}/{e_mlx:.3g}{'' if ok else ' <-- WORSE'}")
        again = [chain_outputs(chain, layer, h, a, h2, act, rope, where) for _ in range(5)]
        same = all(bool(mx.array_equal(r[key], ours[key]).item())
                   for r in again for key in ours)
        repeat &= same
        print(f"{name:16s} RoPE in the kernel {rope}: error ours/MLX's: {', '.join(line)}; "
              f"five calls the same bytes {same}", flush=True)
    print(f"CHAIN ACCURATE {'yes' if accurate else 'no'}", flush=True)
    print(f"CHAIN REPEAT {'yes' if repeat else 'no'}", flush=True)
    return accurate and repeat


def time_part() -> bool:
    for name in ("llama-3.2-1b@L1", "qwen3-0.6b@L1", "llama-3.1-8b@L1"):
        time_shape(name)
    return True


def time_shape(name: str) -> None:
    from batchlab.engine.paths.fast.chain_decode import RowChain

    model, layer, h = layer_inputs(name)
    chain = RowChain(model)
    attn, mlp = layer.self_attn, layer.mlp
    shape = chain.layers[0]
    n_q, n_kv, dim = shape.heads
    offset = mx.array([77], dtype=mx.int32)
    a = mx.random.normal((1, n_q * dim)).astype(h.dtype)
    act = mx.random.normal((1, mlp.gate_proj.weight.shape[0])).astype(h.dtype)
    mx.eval(a, act)
    norm, post = layer.input_layernorm, layer.post_attention_layernorm

    def mlx_qkv():
        xn = norm(h)
        q = attn.q_proj(xn).reshape(1, n_q, 1, dim)
        k = attn.k_proj(xn).reshape(1, n_kv, 1, dim)
        return attn.rope(q, offset=offset), attn.rope(k, offset=offset), attn.v_proj(xn)

    rows = [
        ("norm+qkv+rope", lambda: rc.norm_qkv(h, norm.weight, shape.input_eps,
                                              attn.q_proj.weight, attn.k_proj.weight,
                                              attn.v_proj.weight, shape.heads,
                                              rc.rotation(offset, chain.inv_freq)),
         mlx_qkv, (n_q + 2 * n_kv) * dim),
        ("o+residual", lambda: rc.residual_product(h, attn.o_proj.weight, a),
         lambda: h + attn.o_proj(a), h.shape[1]),
        ("norm+swiglu", lambda: rc.norm_swiglu(h, post.weight, shape.post_eps,
                                               mlp.gate_proj.weight, mlp.up_proj.weight),
         lambda: (lambda x: mlp.gate_proj(x) * mx.sigmoid(mlp.gate_proj(x))
                  * mlp.up_proj(x))(post(h)), 2 * act.shape[1]),
        ("down+residual", lambda: rc.residual_product(h, mlp.down_proj.weight, act),
         lambda: h + mlp.down_proj(act), h.shape[1]),
    ]
    for label, ours, theirs, out_rows in rows:
        t_ours, t_mlx = timed(ours), timed(theirs)
        k = act.shape[1] if label.startswith("down") else (
            n_q * dim if label.startswith("o") else h.shape[1])
        gbytes = out_rows * k * h.dtype.size / 1e9
        print(f"{name:16s} {label:14s} chain {t_ours:7.1f} us ({gbytes / t_ours * 1e3:5.2f}"
              f" TB/s)  MLX ops {t_mlx:7.1f} us", flush=True)


def slices_part() -> bool:
    """Each kernel at every slice count (S warps a pair of rows), five calls each, for
    Nsight Compute to time (the kernel's name carries its template arguments)."""
    for name in ("llama-3.2-1b@L1",):
        slices_shape(name)
    return True


def slices_shape(name: str) -> None:
    from batchlab.engine.paths.fast.chain_decode import RowChain

    model, layer, h = layer_inputs(name)
    lay = RowChain(model).layers[0]
    act = mx.random.normal((1, lay.w_gate.shape[0])).astype(h.dtype)
    a = mx.random.normal((1, lay.wo.shape[1])).astype(h.dtype)
    offset = mx.array([77], dtype=mx.int32)
    rotate = rc.rotation(offset, rc.rope_inverse_frequencies(lay.attn.rope))
    calls = (("norm_qkv", h.shape[1], lambda s: rc.norm_qkv(
                 h, lay.input_norm, lay.input_eps, lay.wq, lay.wk, lay.wv, lay.heads,
                 rotate, slices=s)),
             ("norm_qkv without RoPE", h.shape[1], lambda s: rc.norm_qkv(
                 h, lay.input_norm, lay.input_eps, lay.wq, lay.wk, lay.wv, lay.heads,
                 None, slices=s)),
             ("o", a.shape[1], lambda s: rc.residual_product(h, lay.wo, a, slices=s)),
             ("norm_swiglu", h.shape[1], lambda s: rc.norm_swiglu(
                 h, lay.post_norm, lay.post_eps, lay.w_gate, lay.w_up, slices=s)),
             ("down", act.shape[1], lambda s: rc.residual_product(h, lay.w_down, act,
                                                                   slices=s)))
    for label, k, call in calls:
        for s in (1, 2, 4, 8):
            if 32 * s > k // 8:
                continue
            for _ in range(5):
                mx.eval(call(s))
            print(f"{name} {label} K={k} S={s}: 5 calls", flush=True)


def fast_part() -> bool:
    from batchlab.bench.shapes import load_model

    ok_all = True
    for name in ("llama-3.2-1b@L3", "qwen3-0.6b@L3"):
        loaded = load_model(name)
        runs = {}
        for label, flag in (("plain", "0"), ("chain", "1"), ("chain again", "1")):
            os.environ["BATCHLAB_FAST_CHAIN"] = flag
            runs[label] = run_fast(loaded.model, "1", 1, 64, 300, loaded.vocab_size,
                                   one_row="0")
        os.environ["BATCHLAB_FAST_CHAIN"] = "0"
        repeat = runs["chain"] == runs["chain again"]
        ok_all &= repeat
        print(f"fast {name} B=1: {len(runs['chain'])} emissions; against fast without the "
              f"chain, {against(runs['plain'], runs['chain'])}; the chain twice the same "
              f"bytes: {repeat}", flush=True)
    print(f"CHAIN FAST REPEAT {'yes' if ok_all else 'no'}", flush=True)
    return ok_all


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    ok = True
    for part, fn in (("kernels", kernels_part), ("time", time_part), ("fast", fast_part),
                     ("slices", slices_part)):
        if what == part or (what == "all" and part != "slices"):
            ok &= fn()
    sys.exit(0 if ok else 1)
