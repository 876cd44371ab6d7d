"""Issue 28, item 2: what one ``mx.fast.cuda_kernel`` call costs the host, against MLX ops.

For llama-3.2-1b's o_proj shape (2048 x 2048, one row): N calls built into a graph (the
Python and C++ work of making the arrays, no evaluation), then evaluated (MLX's encode
and launch, and the device), for ``row_chain.residual_product`` (one custom kernel),
``h + a @ w.T`` (two MLX ops), and a custom kernel with the same inputs and a one-line
source and no header (what the call costs without row_chain's source to copy and hash).

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/kernel_call_cost.py
"""

from __future__ import annotations

import statistics
import time

import mlx.core as mx

from batchlab.engine.kernels import row_chain as rc

N = 200
TINY = mx.fast.cuda_kernel(name="batchlab_tiny", input_names=["h", "w", "a"],
                           output_names=["out"], source="out[0] = h[0];",
                           ensure_row_contiguous=True)


def tiny(h, w, a):
    return TINY(inputs=[h, w, a], template=[("T", h.dtype)], grid=(256, 1, 1),
                threadgroup=(256, 1, 1), output_shapes=[h.shape], output_dtypes=[h.dtype])[0]


def cost(fn) -> tuple[float, float]:
    build, run = [], []
    for _ in range(7):
        mx.synchronize()
        t0 = time.perf_counter()
        outs = [fn() for _ in range(N)]
        t1 = time.perf_counter()
        mx.eval(outs)
        mx.synchronize()
        t2 = time.perf_counter()
        build.append((t1 - t0) / N * 1e6)
        run.append((t2 - t1) / N * 1e6)
    return statistics.median(build), statistics.median(run)


def main() -> None:
    mx.random.seed(0)
    h = mx.random.normal((1, 2048)).astype(mx.bfloat16)
    a = mx.random.normal((1, 2048)).astype(mx.bfloat16)
    w = (mx.random.normal((2048, 2048)) * 0.02).astype(mx.bfloat16)
    mx.eval(h, a, w)
    for label, fn in (("row_chain.residual_product", lambda: rc.residual_product(h, w, a)),
                      ("MLX h + a @ w.T", lambda: h + a @ w.T),
                      ("MLX a @ w.T", lambda: a @ w.T),
                      ("MLX h + a", lambda: h + a),
                      ("tiny custom kernel", lambda: tiny(h, w, a))):
        fn()
        b, r = cost(fn)
        print(f"{label:28s} build {b:6.1f} us a call, eval {r:6.1f} us a call", flush=True)


if __name__ == "__main__":
    main()
