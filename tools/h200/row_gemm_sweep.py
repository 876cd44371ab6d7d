"""The row GEMM's launch shapes on the H200: which is fastest at each M, all the same bits.

    python3 tools/h200/row_gemm_sweep.py     # prints SWEEP SAME yes|no, then the times

The kernels' arithmetic is fixed by K alone (``engine/kernels/row_gemm.py``); a launch
shape (``SplitShape``, ``TiledShape``) decides only which thread computes an element. So
every candidate in ``CANDIDATE_SPLIT`` / ``CANDIDATE_TILED`` must give the default's
output bit for bit (checked first, ``mx.array_equal`` at every M timed), and the choice
between them is speed alone. Times: microseconds per product, 40 independent products
evaluated together (the host's cost per call is in it, as in a decode step), beside
cuBLAS's ``x @ W.T``; then each candidate's sum over one decode step's projections of
llama-3.2-1b and llama-3.1-8b (q, k, v, o, gate, up, down per layer and the head).
"""

from __future__ import annotations

import math
import sys
import time

import mlx.core as mx

from batchlab.engine.kernels.row_gemm import (
    CANDIDATE_SPLIT,
    CANDIDATE_TILED,
    TILED,
    TILED_FROM,
    _tiling,
    row_gemm,
)

# (K, N) -> projections of that shape in one decode step
MODELS = {
    "llama-3.2-1b": {(2048, 2048): 32, (2048, 512): 32, (2048, 8192): 32, (8192, 2048): 16,
                     (2048, 128256): 1},
    "llama-3.1-8b": {(4096, 4096): 64, (4096, 1024): 64, (4096, 14336): 64,
                     (14336, 4096): 32, (4096, 128256): 1},
}
SPLIT_MS = (1, 8, 16, 64)
TILED_MS = (128, 256)


def timed(fn, reps: int = 40) -> float:
    mx.eval(fn())
    mx.synchronize()
    start = time.perf_counter()
    mx.eval([fn() for _ in range(reps)])
    mx.synchronize()
    return (time.perf_counter() - start) / reps * 1e6


def candidates(m: int) -> list:
    """The default shape at m first, then the other shapes of the same kernel family."""
    if m < TILED_FROM:
        default = _tiling(m)
        pool = [s for s in CANDIDATE_SPLIT if s.mt * 16 >= min(m, 16) and (s.xb or m <= 8)]
    else:
        default, pool = TILED, list(CANDIDATE_TILED)
    return [default] + [s for s in pool if s != default]


def main() -> int:
    print("mlx", mx.__version__, mx.default_device(), flush=True)
    shapes = sorted({kn for model in MODELS.values() for kn in model})
    same = True
    times: dict[tuple, float] = {}
    for k, n in shapes:
        mx.random.seed(k + n)
        w = (mx.random.normal((n, k)) / math.sqrt(k)).astype(mx.bfloat16)
        for m in SPLIT_MS + TILED_MS:
            x = mx.random.normal((m, k)).astype(mx.bfloat16)
            mx.eval(x, w)
            shapes_m = candidates(m)
            ref = row_gemm(x, w, shape=shapes_m[0])
            cells = [f"cuBLAS {timed(lambda x=x, w=w: x @ w.T):.1f}"]
            for i, shape in enumerate(shapes_m):
                equal = mx.array_equal(row_gemm(x, w, shape=shape), ref).item()
                same &= equal
                us = timed(lambda x=x, w=w, s=shape: row_gemm(x, w, shape=s))
                times[(k, n, m, shape)] = us
                cells.append(f"#{i} {us:.1f}{'' if equal else ' DIFFERS'}")
            print(f"K={k} N={n} M={m}: " + "; ".join(cells), flush=True)
    print(f"SWEEP SAME {'yes' if same else 'no'}")
    print("shapes (#0 is the default at that M):")
    for m in SPLIT_MS + TILED_MS:
        print(f"  M={m}: " + "; ".join(f"#{i} {s}" for i, s in enumerate(candidates(m))))
    print("one decode step's projections, us (sum over layers), per shape:")
    for name, model in MODELS.items():
        for m in SPLIT_MS + TILED_MS:
            totals = [sum(count * times[(k, n, m, s)] for (k, n), count in model.items())
                      for s in candidates(m)]
            best = min(range(len(totals)), key=totals.__getitem__)
            print(f"  {name} M={m}: " + "; ".join(f"#{i} {t:.0f}" for i, t in enumerate(totals))
                  + f"  best #{best}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
