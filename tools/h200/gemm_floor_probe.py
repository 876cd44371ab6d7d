"""Issue 28: may one padded GEMM replace the invariant path's fixed 64-row blocks once
M >= 64 (decode at B > 64 and the batched prefill)? Run on the H200 in the h200b session.

For every projection shape of llama-3.2-1b and llama-3.1-8b (and the tied / untied
heads), compares each row of ``x @ W.T`` computed in 64-row blocks (what the invariant
path runs today) with the same rows computed in one GEMM of M rows, M = 64 .. 32768 (a
prefill of 256 prompts of 128 tokens is M = 32768), random bf16 data, rows at every
position. Prints, per shape, the M values whose rows differ from the blocked ones in
any bit. Only if none differs for every shape is the floor worth gating
(matrices/invariant-cuda.toml B65 / B129 and invariant.toml), and even then it is a
finding for these shapes, not a guarantee for every model: see docs/invariant.md.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/gemm_floor_probe.py
"""

from __future__ import annotations

import mlx.core as mx

SHAPES = {  # (out, in) of every distinct projection
    "llama-3.2-1b": [(2048, 2048), (512, 2048), (8192, 2048), (2048, 8192), (128256, 2048)],
    "llama-3.1-8b": [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336),
                     (128256, 4096)],
}
# every decode M (B up to 1024 padded to whole blocks), then the prefill's larger M
MS = (*range(64, 1025, 64), 2048, 4096, 8192, 16384, 32768)
BLOCK = 64


def blocked(x: mx.array, w: mx.array) -> mx.array:
    return mx.concatenate([x[i : i + BLOCK] @ w.T for i in range(0, x.shape[0], BLOCK)])


def main() -> None:
    mx.random.seed(0)
    first_bad = []  # per shape: the smallest M whose rows differ from the blocks
    for model, shapes in SHAPES.items():
        for out_f, in_f in shapes:
            w = (mx.random.normal((out_f, in_f)) * 0.02).astype(mx.bfloat16)
            differs = []
            for m in MS:
                if out_f * m > 2**32 // 2:  # the head at large M: cap the output size
                    continue
                x = mx.random.normal((m, in_f)).astype(mx.bfloat16)
                one = x @ w.T
                ref = blocked(x, w)
                same = mx.array_equal(one, ref).item()
                if not same:
                    rows = mx.any(one != ref, axis=1).sum().item()
                    differs.append(f"M={m} ({rows} rows)")
                del x, one, ref
            verdict = "identical at every M" if not differs else "DIFFERS: " + ", ".join(differs)
            print(f"{model} {out_f}x{in_f}: {verdict}", flush=True)
            if differs:
                first_bad.append(int(differs[0].split()[0][2:]))
            del w
            mx.clear_cache()
    # the largest probed M below every shape's first difference: one GEMM up to there
    # reproduces the blocks at every M probed (a machine-readable last line)
    limit = min(first_bad, default=MS[-1] + 1)
    floor = max((m for m in MS if m < limit), default=0)
    print(f"FLOOR {floor}", flush=True)


if __name__ == "__main__":
    main()
