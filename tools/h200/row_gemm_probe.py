"""The row GEMM on the H200 (``engine/kernels/row_gemm.py``): every row the same bits at
every M, its distance from float32 against cuBLAS's, and its time against ``x @ W.T``.

    python3 tools/h200/row_gemm_probe.py      # prints ROW GEMM INVARIANT / ACCURATE yes|no
    QUICK=1 python3 tools/h200/row_gemm_probe.py   # bfloat16 only, M = 256 timed

Invariance: for each (K, N) the rows of ``row_gemm(x[a:a+m], W)`` are compared with
the same rows of one call over all 300 rows (``mx.array_equal``), at 17 values of m
and two offsets a (the row's neighbours change with a). Accuracy: relative RMS against
the float32 product, beside cuBLAS's bfloat16 GEMM at the same M. The two kernels (split
below ``TILED_FROM`` rows, tiled from it) are compared over the same 300 rows too. Time:
40 independent products evaluated at once, microseconds per product.
"""

from __future__ import annotations

import math
import os
import time

import mlx.core as mx

from batchlab.engine.kernels.row_gemm import row_gemm, row_gemm_group

# (K, N): llama-3.2-1b's q/o, k/v, gate/up, down and tied head; llama-3.1-8b's;
# zoo-sized and ragged ones (K a multiple of 8, N any)
SHAPES = [(2048, 2048), (2048, 512), (2048, 8192), (8192, 2048), (2048, 128256),
          (4096, 4096), (4096, 1024), (4096, 14336), (14336, 4096),
          (64, 64), (64, 256), (48, 24), (40, 136), (256, 1000)]
MS = [1, 2, 3, 5, 8, 13, 16, 17, 31, 33, 64, 65, 100, 128, 200, 256, 280]
TIMED = [(2048, 2048), (2048, 512), (2048, 8192), (8192, 2048), (2048, 128256),
         (4096, 4096), (4096, 14336)]


def rel_rms(y: mx.array, ref: mx.array) -> float:
    d = y.astype(mx.float32) - ref
    return math.sqrt(mx.mean(d * d).item() / max(mx.mean(ref * ref).item(), 1e-30))


def timed(fn, reps: int = 40) -> float:
    mx.eval(fn())
    mx.synchronize()
    start = time.perf_counter()
    mx.eval([fn() for _ in range(reps)])
    mx.synchronize()
    return (time.perf_counter() - start) / reps * 1e6


def main() -> None:
    print("mlx", mx.__version__, mx.default_device())
    quick = os.environ.get("QUICK") == "1"  # bf16 only, M 256 timed: a re-check of speed
    invariant = accurate = True
    for dtype in (mx.bfloat16,) if quick else (mx.bfloat16, mx.float16):
        for k, n in SHAPES if dtype == mx.bfloat16 else SHAPES[:3] + SHAPES[-4:]:
            mx.random.seed(k * 7 + n)
            x = mx.random.normal((300, k)).astype(dtype)
            w = (mx.random.normal((n, k)) / math.sqrt(k)).astype(dtype)
            full = row_gemm(x, w)
            bad = [(a, m) for a in (0, 7) for m in MS
                   if not mx.array_equal(row_gemm(x[a:a + m], w), full[a:a + m]).item()]
            # both kernels over the same 300 rows: the same function of each element
            if not mx.array_equal(row_gemm(x, w, tiled=True), row_gemm(x, w, tiled=False)).item():
                bad.append("tiled != split at m=300")
            ref = x.astype(mx.float32) @ w.astype(mx.float32).T
            ours, cublas = rel_rms(full, ref), rel_rms(x @ w.T, ref)
            ok_acc = ours <= 2 * cublas + 1e-6
            invariant &= not bad
            accurate &= ok_acc
            print(f"{dtype} K={k} N={n}: rows equal at every (offset, m): {not bad}"
                  f"{'' if not bad else f' (differ at {bad[:4]})'}; rel RMS row_gemm "
                  f"{ours:.2e} cuBLAS {cublas:.2e}{'' if ok_acc else ' TOO FAR'}", flush=True)
    # grouped calls (q/k/v, gate/up of llama-3.2-1b and llama-3.1-8b): each element equal
    # to the single product's, at both kernels' row counts
    # (a boundary inside an 8-column fragment: 20 + 44 + 12; and one float16 group)
    for k, ns, dt in ((2048, (2048, 512, 512), mx.bfloat16), (2048, (8192, 8192), mx.bfloat16),
                      (4096, (4096, 1024, 1024), mx.bfloat16), (4096, (14336, 14336), mx.bfloat16),
                      (64, (64, 16, 16), mx.bfloat16), (48, (24, 40), mx.bfloat16),
                      (40, (20, 44, 12), mx.bfloat16), (2048, (2048, 512, 512), mx.float16)):
        mx.random.seed(k + sum(ns))
        x = mx.random.normal((300, k)).astype(dt)
        ws = [(mx.random.normal((n, k)) / math.sqrt(k)).astype(dt) for n in ns]
        bad = [m for m in (1, 5, 16, 17, 64, 65, 256, 300)
               if not mx.array_equal(row_gemm_group(x[:m], ws),
                                     mx.concatenate([row_gemm(x[:m], w) for w in ws], -1)).item()]
        invariant &= not bad
        print(f"grouped {dt} K={k} N={ns}: equal to the single products: {not bad}"
              f"{'' if not bad else f' (differ at m={bad})'}", flush=True)
    print(f"ROW GEMM INVARIANT {'yes' if invariant else 'no'}")
    print(f"ROW GEMM ACCURATE {'yes' if accurate else 'no'}", flush=True)
    print("us per product (40 evaluated together): row_gemm / x @ W.T")
    for k, n in TIMED:
        w = (mx.random.normal((n, k)) / math.sqrt(k)).astype(mx.bfloat16)
        cells = []
        for m in (256,) if quick else (1, 8, 64, 256) + ((1024, 4096) if n <= 8192 else ()):
            x = mx.random.normal((m, k)).astype(mx.bfloat16)
            mx.eval(x, w)
            ours = timed(lambda x=x, w=w: row_gemm(x, w))
            theirs = timed(lambda x=x, w=w: x @ w.T)
            cells.append(f"M={m} {ours:.1f}/{theirs:.1f}")
        print(f"K={k} N={n}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
