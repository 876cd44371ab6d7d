"""Issue 28, item 3: fast's tiled decode kernel (``grouped_decode_tiled.py``, its own
rounding) on the H200: accurate, repeatable, and faster than the looped kernel?

Part ``accuracy``: per head shape (the bench's 1B, 8B and 0.6B heads, head dim 96,
float16, float32, G = 8), batch and key count (1 to 4096: one chunk and several), random
inputs, keys and values a slice of a buffer grown in steps of 256 as BatchKV serves them
(and, on two shapes, strided views with the head dim not contiguous): the largest error
against float32 attention over the same inputs, for the tiled kernel and for MLX's own
attention in the model's dtype. ``TILED ACCURATE yes`` where the tiled kernel's error is
at most twice MLX's (plus 1e-6) on every call; ``TILED REPEAT yes`` where five calls on
the same arrays gave the same bytes every time.

Part ``time``: us a call, tiled (at its default warps a block, then 2 and 8) against the
looped kernel (MLX's bits, fast's default before the tiled one) and MLX's attention, at
the bench's shapes, then B = 1 / 4 / 64 over long contexts.

Part ``fast``: fast's scheduler at B = 256 on the 8B and 1B heads (three layers, random
weights, greedy, rows ending over 300 steps, a ragged join), tiled against the looped
kernel: the share of equal tokens, the largest KL between the two runs' logprobs while
their tokens agree, and the tiled run twice (``TILED FAST REPEAT yes``).

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/tiled_probe.py [accuracy|time|fast|all]
"""

from __future__ import annotations

import sys

import mlx.core as mx
import numpy as np

from batchlab.engine.kernels import grouped_decode as gd
from batchlab.engine.kernels import grouped_decode_tiled as tiled

sys.path.insert(0, "tools/h200")
from gqa_exact_probe import BF, F32, HEADS, SDPA, inputs, run_fast, timed

KEYS = (1, 2, 31, 33, 100, 192, 255, 256, 300, 511, 1100, 4096)


def tiled_call(q, k, v, scale):
    return gd.grouped_decode_attention(q, k, v, scale, tiled_order=True)


def error(out, ref) -> float:
    return float(mx.abs(out.astype(F32) - ref).max().item())


def accuracy_part() -> bool:
    mx.random.seed(3)
    accurate = repeat = True
    for name, hq, hkv, dim, dt, batches in HEADS:
        scale = dim ** -0.5
        worst, rows = 0.0, []
        for b in batches:
            for keys in KEYS:
                width = (keys + 255) // 256 * 256
                q, kbuf, vbuf = inputs(b, hq, hkv, dim, dt, keys, width)
                views = [(kbuf[:, :, :keys], vbuf[:, :, :keys], "slice")]
                if name in ("llama-3.1-8b", "f32 d64 G1") and keys in (33, 300):
                    kt = mx.swapaxes(mx.swapaxes(kbuf, 2, 3) * 1, 2, 3)[:, :, :keys]
                    views.append((kt, mx.swapaxes(mx.swapaxes(vbuf, 2, 3) * 1, 2, 3)[:, :, :keys],
                                  "strided"))
                for k, v, how in views:
                    mx.eval(q, k, v)
                    ref = SDPA(q.astype(F32), k.astype(F32), v.astype(F32), scale=scale,
                               mask=None)
                    ours = [tiled_call(q, k, v, scale) for _ in range(5)]
                    mlx = SDPA(q, k, v, scale=scale, mask=None)
                    mx.eval(ref, mlx, *ours)
                    same = all(mx.array_equal(ours[0], o).item() for o in ours[1:])
                    e_ours, e_mlx = error(ours[0], ref), error(mlx, ref)
                    ok = e_ours <= 2 * e_mlx + 1e-6
                    accurate &= ok
                    repeat &= same
                    worst = max(worst, e_ours / max(e_mlx, 1e-9))
                    if not ok or not same or keys in (255, 4096):
                        rows.append(f"B{b}/N{keys}/{how} {e_ours:.2g} vs {e_mlx:.2g}"
                                    + ("" if same else " NOT REPEATED")
                                    + ("" if ok else " WORSE"))
        print(f"{name:14s} D={dim:3d} G={hq // hkv} {str(dt):14s} worst ratio {worst:.2f}: "
              + "; ".join(rows[:8]), flush=True)
    print(f"TILED ACCURATE {'yes' if accurate else 'no'}", flush=True)
    print(f"TILED REPEAT {'yes' if repeat else 'no'}", flush=True)
    return accurate and repeat


TIMED = (("llama-3.1-8b", 32, 8, 128, 256, 128), ("llama-3.1-8b", 32, 8, 128, 256, 192),
         ("llama-3.1-8b", 32, 8, 128, 256, 255), ("llama-3.1-8b", 32, 8, 128, 256, 448),
         ("llama-3.1-8b", 32, 8, 128, 64, 192), ("llama-3.2-1b", 32, 8, 64, 256, 192),
         ("llama-3.2-1b", 32, 8, 64, 64, 128), ("qwen3-0.6b", 16, 8, 128, 256, 192),
         ("llama-3.1-8b", 32, 8, 128, 1, 4096), ("llama-3.1-8b", 32, 8, 128, 1, 16384),
         ("llama-3.1-8b", 32, 8, 128, 4, 8192), ("llama-3.2-1b", 32, 8, 64, 64, 2048))


def time_part() -> bool:
    print(f"{'shape':14s} {'B':>4s} {'keys':>6s} {'tiled us':>9s} {'w2 us':>7s} {'w8 us':>7s} "
          f"{'looped us':>10s} {'MLX us':>8s} {'MB':>7s} {'tiled GB/s':>10s}", flush=True)
    for name, hq, hkv, dim, b, keys in TIMED:
        width = (keys + 255) // 256 * 256
        q, kbuf, vbuf = inputs(b, hq, hkv, dim, BF, keys, width)
        k, v = kbuf[:, :, :keys], vbuf[:, :, :keys]
        mx.eval(q, k, v)
        scale = dim ** -0.5
        us_t = timed(lambda: tiled_call(q, k, v, scale))  # noqa: B023
        us_w = [timed(lambda w=w: tiled.tiled_decode_attention(q, k, v, scale, w))  # noqa: B023
                for w in (2, 8)]
        us_l = timed(lambda: gd.grouped_decode_attention(q, k, v, scale))  # noqa: B023
        us_m = timed(lambda: SDPA(q, k, v, scale=scale, mask=None))  # noqa: B023
        mb = 2 * b * hkv * keys * dim * 2 / 1e6
        print(f"{name:14s} {b:4d} {keys:6d} {us_t:9.1f} {us_w[0]:7.1f} {us_w[1]:7.1f} "
              f"{us_l:10.1f} {us_m:8.1f} {mb:7.1f} "
              f"{mb / us_t * 1e3:10.0f}  chunks {tiled.num_chunks(b, hkv, keys)}", flush=True)
    return True


def by_row(emissions) -> dict:
    rows: dict = {}
    for row, token, lp in emissions:
        rows.setdefault(row, []).append((token, np.frombuffer(lp, np.float32)))
    return rows


def against(base_run, our_run) -> str:
    """Two runs' emissions compared row by row up to each row's first different token:
    the steps compared, their largest and mean KL, and the share with the same top-1."""
    from batchlab.judging.kl import normalized

    base, ours = by_row(base_run), by_row(our_run)
    kls, top1, steps = [], 0, 0
    for row, steps_ours in ours.items():
        for (tok, lp), (tok_b, lp_b) in zip(steps_ours, base.get(row, ())):
            a, b = normalized(lp_b), normalized(lp)
            kls.append(float(np.sum(np.exp(a) * (a - b))))
            top1 += int(np.argmax(lp) == np.argmax(lp_b))
            steps += 1
            if tok != tok_b:
                break
    return (f"row by row to the first different token: {steps} steps, max KL "
            f"{max(kls):.3g}, mean {np.mean(kls):.3g}, same top-1 {top1 / steps:.1%}")


def fast_part() -> bool:
    from batchlab.bench.shapes import load_model

    ok_all = True
    for name in ("llama-3.1-8b@L3", "llama-3.2-1b@L3"):
        loaded = load_model(name)
        runs = {}
        for label, flag in (("looped", False), ("tiled", True), ("tiled again", True)):
            gd.TILED = flag
            runs[label] = run_fast(loaded.model, "1", 256, 64, 300, loaded.vocab_size)
        gd.TILED = False
        repeat = runs["tiled"] == runs["tiled again"]
        ok_all &= repeat
        print(f"fast {name} B=256: {len(runs['tiled'])} emissions; against looped's, "
              f"{against(runs['looped'], runs['tiled'])}; tiled twice the same bytes: "
              f"{repeat}", flush=True)
    print(f"TILED FAST REPEAT {'yes' if ok_all else 'no'}", flush=True)
    return ok_all


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    ok = True
    if what in ("accuracy", "all"):
        ok &= accuracy_part()
    if what in ("time", "all"):
        ok &= time_part()
    if what in ("fast", "all"):
        ok &= fast_part()
    sys.exit(0 if ok else 1)
