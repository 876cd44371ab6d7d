"""The row GEMM's launch shapes on the H200: which is fastest at each M, all the same bits.

    python3 tools/h200/row_gemm_sweep.py     # prints SWEEP SAME yes|no, then the times
    ncu --profile-from-start off --cache-control all --clock-control none \
        --metrics gpu__time_duration.sum --csv --page raw --print-units base \
        python3 tools/h200/row_gemm_sweep.py ncu k.json > k.csv   # each product once
    python3 tools/h200/row_gemm_sweep.py parse k.csv k.json   # device time per product

The kernels' arithmetic is fixed by K alone (``engine/kernels/row_gemm.py``); a launch
shape (``SplitShape``, ``TiledShape``) decides only which thread computes an element. So
every candidate in ``CANDIDATE_SPLIT`` / ``CANDIDATE_TILED`` must give the default's
output bit for bit (checked first, ``mx.array_equal`` at every M timed), and the choice
between them is speed alone. Times: microseconds per product, 40 independent products
evaluated together (the host's cost per call is in it, as in a decode step), beside
cuBLAS's ``x @ W.T``; then each candidate's sum over one decode step's projections of
llama-3.2-1b and llama-3.1-8b (q, k, v, o, gate, up, down per layer and the head).

Those times are the host's for all but the largest products (a custom kernel's call
costs tens of microseconds of host time). The ``ncu`` mode runs every product once
inside ``cudaProfilerStart`` / ``Stop``, each behind a marker kernel that names it, with
the caches flushed before each kernel (a decode step streams its weights from memory);
``parse`` reads Nsight Compute's per-kernel device times back into the same tables.
"""

from __future__ import annotations

import math
import sys

import mlx.core as mx
from row_gemm_probe import timed  # tools/h200, the script's own folder

from batchlab.engine.kernels.row_gemm import (
    CANDIDATE_CLASS_WARPS,
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


def candidates(m: int) -> list:
    """The default shape at m first, then the other shapes of the same kernel family."""
    if m < TILED_FROM:
        default = _tiling(m)
        pool = [s for s in CANDIDATE_SPLIT if s.mt * 16 >= min(m, 16) and (s.xb or m <= 8)]
        if m > 16:  # the class-warp kernel's tiles (any shape gives any M the same bits)
            pool += list(CANDIDATE_CLASS_WARPS)
    else:
        default, pool = TILED, list(CANDIDATE_TILED)
    return [default] + [s for s in pool if s != default]


def _marker():
    return mx.fast.cuda_kernel(
        name="batchlab_sweep_marker", input_names=["a"], output_names=["out"],
        source="out[0] = a[0] + I;")


def profiled(items_path: str) -> int:
    """Every (K, N, M, cuBLAS or candidate) once under the profiler, each behind the
    marker kernel numbered by its index in ``items()``, which goes to ``items_path``
    (the parse must see the order that ran, whatever the defaults are by then)."""
    import json

    with open(items_path, "w") as f:
        json.dump([[k, n, m, repr(shape)] for k, n, m, shape in items()], f)
    sys.path.insert(0, "tools/h200")
    from step_kernels import cudart

    marker, one = _marker(), mx.zeros((1,), mx.float32)
    runs, weights, inputs = [], {}, {}
    for i, (k, n, m, shape) in enumerate(items()):
        if (k, n) not in weights:  # one weight per shape (the 8B head alone is 1 GB)
            weights[(k, n)] = (mx.random.normal((n, k)) / math.sqrt(k)).astype(mx.bfloat16)
        if (k, m) not in inputs:
            inputs[(k, m)] = mx.random.normal((m, k)).astype(mx.bfloat16)
        w, x = weights[(k, n)], inputs[(k, m)]
        mx.eval(x, w)
        product = (lambda x=x, w=w: x @ w.T) if shape is None else (
            lambda x=x, w=w, s=shape: row_gemm(x, w, shape=s))
        mx.eval(product())  # compiled and warm before the profiled pass
        runs.append((i, product))
    mx.synchronize()
    lib = cudart()
    lib.cudaProfilerStart()
    for i, product in runs:
        mx.eval(marker(inputs=[one], template=[("I", i)], grid=(1, 1, 1),
                       threadgroup=(1, 1, 1), output_shapes=[(1,)],
                       output_dtypes=[mx.float32])[0])
        mx.eval(product())
    mx.synchronize()
    lib.cudaProfilerStop()
    return 0


def items() -> list:
    """(K, N, M, shape or None for cuBLAS), in a fixed order; ``SWEEP_MS=1,256`` and
    ``SWEEP_SHAPES=4096x14336,...`` (K x N) keep a subset (under Nsight Compute a product
    costs ~2.5 s: s20 got through two shapes in its 240 s)."""
    import os

    shapes = sorted({kn for model in MODELS.values() for kn in model})
    ms = SPLIT_MS + TILED_MS
    if os.environ.get("SWEEP_MS"):
        ms = tuple(int(m) for m in os.environ["SWEEP_MS"].split(","))
    if os.environ.get("SWEEP_SHAPES"):
        wanted = os.environ["SWEEP_SHAPES"].split(",")
        keep = {tuple(int(v) for v in kn.split("x")) for kn in wanted}
        shapes = [kn for kn in shapes if kn in keep]
    return [(k, n, m, shape) for k, n in shapes for m in ms for shape in [None, *candidates(m)]]


def parse(path: str, items_path: str) -> int:
    """Device microseconds per product from an ``ncu --csv --page raw`` log of ``ncu``
    and the item list it wrote."""
    import csv
    import json
    import re

    with open(path) as f:
        rows = list(csv.reader(ln for ln in f if ln.startswith('"')))
    name_col, time_col = rows[0].index("Kernel Name"), rows[0].index("gpu__time_duration.sum")
    with open(items_path) as f:
        ran = [(k, n, m, shape) for k, n, m, shape in json.load(f)]
    by_repr = {(k, n, m, repr(shape)): shape for k, n, m, shape in items()}
    listed = [(k, n, m, by_repr.get((k, n, m, name), name)) for k, n, m, name in ran]
    device: dict[int, float] = {}
    current = None
    for row in rows[1:]:
        try:
            ns = float(row[time_col].replace(",", ""))
        except ValueError:
            continue  # the units row
        hit = re.search(r"batchlab_sweep_marker_(\d+)", row[name_col])
        if hit:
            current = int(hit.group(1))
            device[current] = 0.0
        elif current is not None:
            device[current] += ns / 1e3
    times = {}
    for i, (k, n, m, shape) in enumerate(listed):
        times[(k, n, m, None if shape == "None" else shape)] = device.get(i, float("nan"))
    report(times, "device us per product (ncu, caches flushed), cuBLAS first")
    return 0


def report(times: dict, title: str) -> None:
    print(title)
    shapes = sorted({kn for model in MODELS.values() for kn in model})
    for k, n in shapes:
        for m in SPLIT_MS + TILED_MS:
            cells = [f"cuBLAS {times[(k, n, m, None)]:.1f}"] if (k, n, m, None) in times else []
            cells += [f"#{i} {times.get((k, n, m, s), float('nan')):.1f}"
                      for i, s in enumerate(candidates(m))]
            print(f"K={k} N={n} M={m}: " + "; ".join(cells))
    print("shapes (#0 is the default at that M):")
    for m in SPLIT_MS + TILED_MS:
        print(f"  M={m}: " + "; ".join(f"#{i} {s}" for i, s in enumerate(candidates(m))))
    print("one decode step's projections, us (sum over layers), per shape:")
    for name, model in MODELS.items():
        for m in SPLIT_MS + TILED_MS:
            totals = [sum(count * times.get((k, n, m, s), float("nan"))
                          for (k, n), count in model.items())
                      for s in candidates(m)]
            best = min(range(len(totals)), key=totals.__getitem__)
            base = ""
            if all((k, n, m, None) in times for k, n in model):
                cublas = sum(count * times[(k, n, m, None)] for (k, n), count in model.items())
                base = f"cuBLAS {cublas:.0f}; "
            listed = "; ".join(f"#{i} {t:.0f}" for i, t in enumerate(totals))
            print(f"  {name} M={m}: {base}{listed}  best #{best}")


def main() -> int:
    if sys.argv[1:2] == ["ncu"]:
        return profiled(sys.argv[2])
    if sys.argv[1:2] == ["parse"]:
        return parse(sys.argv[2], sys.argv[3])
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
            times[(k, n, m, None)] = timed(lambda x=x, w=w: x @ w.T)
            cells = [f"cuBLAS {times[(k, n, m, None)]:.1f}"]
            for i, shape in enumerate(shapes_m):
                equal = mx.array_equal(row_gemm(x, w, shape=shape), ref).item()
                same &= equal
                us = timed(lambda x=x, w=w, s=shape: row_gemm(x, w, shape=s))
                times[(k, n, m, shape)] = us
                cells.append(f"#{i} {us:.1f}{'' if equal else ' DIFFERS'}")
            print(f"K={k} N={n} M={m}: " + "; ".join(cells), flush=True)
    print(f"SWEEP SAME {'yes' if same else 'no'}")
    report(times, "us per product, 40 evaluated together (host time in it)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
