"""Issue 28 item 1: why a 256-row invariant block crashed, and what its float32 GEMMs cost.

1. RoPE launches (``engine/paths/invariant/ropesplit.py``): ``mx.fast.rope`` over (B, N,
   1, D) bf16 with per-row offsets, as the invariant path's padded decode batch calls it:
   MLX's own launch (``refused`` or ``ok``) beside what ``ropesplit`` predicts, and the
   split rotation against the rotation of 64-row slices (MLX launches those) bit for bit.
2. float32 projections at the zoo's MoE shapes: a row's ``x @ W.T`` in a 256-row GEMM, a
   64-row GEMM and alone (M = 1), each against float64 on the same float32 inputs (rel
   RMS), and in how many
   elements the 256- and 64-row results differ in: a less precise kernel (TF32) would
   show at ~1e-3, rounding of the same accuracy at ~1e-7.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/rope_launch_probe.py
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx import nn

from batchlab.engine.paths.invariant.ropesplit import RowSplitRope, rows_per_launch


def rope_part() -> bool:
    ok = True
    for rows, heads, dim in ((256, 4, 16), (256, 2, 16), (128, 4, 16), (127, 4, 16),
                             (64, 4, 16), (33, 32, 16), (256, 4, 64), (256, 8, 128)):
        rope = nn.RoPE(dim, base=500000.0)
        x = mx.random.normal((rows, heads, 1, dim), key=mx.random.key(rows)).astype(mx.bfloat16)
        offsets = mx.random.randint(0, 300, (rows,), key=mx.random.key(7)).astype(mx.int32)
        try:
            mx.eval(rope(x, offset=offsets))
            whole = "ok"
        except RuntimeError as err:
            whole = "refused (" + str(err).split("failed:")[-1].strip() + ")"
        predicted = rows_per_launch(rows, heads, 1, dim // 2) >= rows
        step = 15 if heads > 16 else 64
        slices = mx.concatenate([rope(x[i : i + step], offset=offsets[i : i + step])
                                 for i in range(0, rows, step)])
        split = RowSplitRope(rope)(x, offset=offsets)
        equal = mx.array_equal(split, slices).item()
        # the CPU takes every launch; on CUDA MLX must refuse exactly what is predicted
        ok &= equal and (mx.default_device() == mx.cpu or (whole == "ok") == predicted)
        print(f"rope B={rows:3d} N={heads:2d} D={dim:3d}: MLX whole {whole:40s} "
              f"predicted {'ok' if predicted else 'refused':7s} split == slices: {equal}",
              flush=True)
    return ok


def gemm_part() -> None:
    rng = np.random.default_rng(0)
    for k, n in ((64, 64), (64, 128), (32, 64), (128, 64), (64, 320)):
        w = rng.standard_normal((n, k)).astype(np.float32) / np.sqrt(k)
        x = rng.standard_normal((256, k)).astype(np.float32)
        exact = x.astype(np.float64) @ w.T.astype(np.float64)
        wm = mx.array(w)
        by256 = np.array(mx.array(x) @ wm.T)
        by64 = np.concatenate([np.array(mx.array(x[i : i + 64]) @ wm.T)
                               for i in range(0, 256, 64)])
        alone = np.concatenate([np.array(mx.array(x[i : i + 1]) @ wm.T) for i in range(256)])

        def err(got, exact=exact):
            d = got.astype(np.float64) - exact
            return f"rel RMS {np.sqrt((d**2).mean() / (exact**2).mean()):.2e}"

        print(f"gemm fp32 {k}->{n}: M=256 {err(by256)} | 64-row {err(by64)} | "
              f"M=1 {err(alone)} | 256 vs 64 differ in "
              f"{100 * (by256 != by64).mean():.1f}% of elements, max rel "
              f"{np.max(np.abs(by256 - by64) / (np.abs(exact) + 1e-30)):.1e}", flush=True)


if __name__ == "__main__":
    print(f"{mx.default_device()}, mlx {mx.__version__}", flush=True)
    rope_ok = rope_part()
    print(f"ROPE OK {'yes' if rope_ok else 'no'}", flush=True)
    gemm_part()
