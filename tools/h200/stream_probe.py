"""How fast one-row products stream their weights on the H200, one layer's shapes of
llama-3.2-1b at a time: fast's one-kernel step (row_step) computes every product as
``two_dots`` over a warp's pairs of rows, a batch of LD loads a row issued, then its
arithmetic, on 132 blocks of 8 warps. Its phases stream at ~1.9 TB/s where MLX's GEMV
reaches ~4.4 (reports/bench/cuda-sm90/issue28-persistent/). Here each product alone:

- ``two_dots`` per unit, as row_step runs it (8 or 16 warps a block, 132 blocks);
- ``stream_pairs`` (row_step's, ``BATCHLAB_ROW_STEP_STREAM``): the next batch's loads (of
  the same unit or the warp's next one) issued before the current batch's arithmetic, so
  loads stay in flight across units; the same sums in the same order (checked: PIPE
  SAME). Offline SASS of two_dots shows ptxas interleaving each load with its FMAs (2-3
  loads in flight a warp), whatever LD;
- MLX's own ``x @ W.T`` for each weight.

Each timing is 24 products in one evaluation over 4 copies of the weights (L2 holds
none of them), best of 5. Prints GB/s a product.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/stream_probe.py
"""

from __future__ import annotations

import math
import time

import mlx.core as mx

from batchlab.engine.kernels.row_step import HEADER

SOURCE = """
    __shared__ alignas(16) T xs[K];
    const int lane = threadIdx.x & 31;
    const int gwarp = blockIdx.x * W + (threadIdx.x >> 5);
    const int nwarps = gridDim.x * W;
    for (int c = threadIdx.x; c < K / (16 / (int)sizeof(T)); c += blockDim.x)
        reinterpret_cast<Vec16<T>*>(xs)[c] = reinterpret_cast<const Vec16<T>*>(x)[c];
    __syncthreads();
    const int units = PAIR ? N : N / 2;
    auto rows = [&](int u, const T*& r0, const T*& r1) {
        if (PAIR) {
            r0 = w0 + (long long)u * K;
            r1 = w1 + (long long)u * K;
        } else {
            r0 = w0 + 2LL * u * K;
            r1 = r0 + K;
        }
    };
    auto emit = [&](int u, float d0, float d1) {
        if (lane == 0) {
            out[PAIR ? u : 2 * u] = static_cast<T>(d0);
            out[PAIR ? N + u : 2 * u + 1] = static_cast<T>(d1);
        }
    };
    if (PIPE) {
        products<T, K, LD, LD>(gwarp, units, nwarps, xs, rows, emit, [](int) {});
    } else {
        products<T, K, 0, LD>(gwarp, units, nwarps, xs, rows, emit, [](int) {});
    }
"""

KERNEL = mx.fast.cuda_kernel(name="batchlab_stream_probe", input_names=["x", "w0", "w1"],
                             output_names=["out"], source=SOURCE, header=HEADER,
                             ensure_row_contiguous=True)

# (name, N, K, pair): llama-3.2-1b's layer
SHAPES = [("q/k/v", 3072, 2048, False), ("o", 2048, 2048, False),
          ("gate/up", 8192, 2048, True), ("down", 2048, 8192, False)]
# (0 two_dots, 1 stream_pairs; LD; warps a block; blocks, 0: a unit a warp)
VARIANTS = [(0, 8, 8, 132), (0, 8, 16, 132), (1, 8, 8, 132), (1, 4, 8, 132),
            (1, 4, 16, 132), (1, 2, 16, 132), (0, 8, 8, 0), (1, 4, 8, 0)]
COPIES, CALLS, TRIALS = 4, 24, 5


def run(x, w0, w1, n, k, pair, variant):
    pipe, ld, warps, blocks = variant
    units = n if pair else n // 2
    blocks = blocks or -(-units // warps)  # 0: a unit a warp, every row at once
    return KERNEL(inputs=[x, w0, w1],
                  template=[("T", mx.bfloat16), ("K", k), ("N", n), ("PAIR", pair),
                            ("PIPE", pipe), ("LD", ld), ("W", warps)],
                  grid=(blocks * 32 * warps, 1, 1), threadgroup=(32 * warps, 1, 1),
                  output_shapes=[(2 * n,) if pair else (n,)],
                  output_dtypes=[mx.bfloat16])[0]


def timed(make) -> float:
    best = math.inf
    for _ in range(TRIALS):
        mx.synchronize()
        start = time.perf_counter()
        mx.eval([make(i) for i in range(CALLS)])
        mx.synchronize()
        best = min(best, time.perf_counter() - start)
    return best / CALLS


def main() -> None:
    mx.random.seed(0)
    same = True
    for name, n, k, pair in SHAPES:
        x = mx.random.normal((k,)).astype(mx.bfloat16)
        ws = [[(mx.random.normal((n, k)) / math.sqrt(k)).astype(mx.bfloat16) for _ in range(2)]
              for _ in range(COPIES)]
        mx.eval(x, ws)
        nbytes = (2 if pair else 1) * n * k * 2
        reference = run(x, *ws[0], n, k, pair, VARIANTS[0])
        line = [f"{name} ({nbytes / 1e6:.1f} MB):"]
        for variant in VARIANTS:
            out = run(x, *ws[0], n, k, pair, variant)
            if not mx.array_equal(out, reference).item():
                same = False
                line.append(f"{variant} DIFFERS")
                continue
            t = timed(lambda i, v=variant: run(x, *ws[i % COPIES], n, k, pair, v))
            line.append(f"{variant} {nbytes / t / 1e9:.0f}")
        xr = x.reshape(1, k)
        mlx = timed(lambda i: [xr @ w.T for w in ws[i % COPIES][: 2 if pair else 1]])
        line.append(f"mlx {nbytes / mlx / 1e9:.0f}")
        print("  ".join(line), flush=True)
    print("PIPE SAME", "yes" if same else "no")


if __name__ == "__main__":
    main()
