"""Issue 28: does the GQA row kernel (``row_attention_gqa.py``: a block per (row, KV
head)) give the per-head row kernel's bits (``row_attention.py``), and how fast is each?

Random bf16 queries / keys / values at the bench's decode shapes (llama-3.2-1b: 32 query
heads over 8 KV heads, head dim 64; llama-3.1-8b: 32 over 8, dim 128), B = 1, 64, 256
(the batch padded to a multiple of 64 query rows, as the invariant path runs it), keys
in a 512-column buffer with each row's own left padding (real keys 129..256). Prints,
per shape, whether the outputs are equal bit for bit and each kernel's time (median of
7 rounds of 24 launches), then the GQA kernel with 2, 4 and 8 keys loaded ahead a warp
(``row_attention_gqa.KEYS_AHEAD``), which must keep the same bits; the last line is
``GQA IDENTICAL yes`` or ``no``.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/row_gqa_probe.py
"""

from __future__ import annotations

import statistics
import time

import mlx.core as mx

from batchlab.engine.kernels import row_attention as ra
from batchlab.engine.kernels import row_attention_gqa as gqa

SHAPES = {"llama-3.2-1b": (32, 8, 64), "llama-3.1-8b": (32, 8, 128)}
WIDTH = 512


def timed(fn, n=24, rounds=7) -> float:
    mx.eval(fn())
    per = []
    for _ in range(rounds):
        start = time.perf_counter()
        mx.eval([fn() for _ in range(n)])
        mx.synchronize()
        per.append((time.perf_counter() - start) / n)
    return statistics.median(per)


def one(name: str, hq: int, hkv: int, hd: int, b: int) -> bool:
    rows = -(-b // 64) * 64
    q = mx.random.normal((rows, hq, 1, hd)).astype(mx.bfloat16)
    k = mx.random.normal((b, hkv, WIDTH, hd)).astype(mx.bfloat16)
    v = mx.random.normal((b, hkv, WIDTH, hd)).astype(mx.bfloat16)
    width = 320  # the view the cache hands the layer
    first = mx.random.randint(0, 192, (b,)).astype(mx.int32)
    kk, vv = k[:, :, :width], v[:, :, :width]
    scale = hd**-0.5

    def run(gqa: bool) -> mx.array:
        ra.GQA = gqa
        return ra.row_attention(q, kk, vv, first, scale)

    plain = run(False)
    same = mx.array_equal(plain, run(True)).item()
    t_plain, t_gqa = timed(lambda: run(False)), timed(lambda: run(True))
    keys = width - float(first.astype(mx.float32).mean().item())
    kv_mb = 2 * b * hkv * keys * hd * 2 / 1e6
    ahead = []
    for u in gqa.UNROLL_CHOICES[1:]:  # keys loaded ahead: the same bits, one time each
        gqa.KEYS_AHEAD = u
        equal = mx.array_equal(plain, run(True)).item()
        same &= equal
        ahead.append(f"U={u} {timed(lambda: run(True)) * 1e6:.1f} us"
                     + ("" if equal else " DIFFERS"))
    gqa.KEYS_AHEAD = 1
    print(f"{name} B={b}: identical={same}  per-head {t_plain * 1e6:.1f} us  "
          f"gqa {t_gqa * 1e6:.1f} us  {'  '.join(ahead)}  (KV {kv_mb:.1f} MB per layer)",
          flush=True)
    return same


def main() -> None:
    mx.random.seed(1)
    same_everywhere = True
    for name, (hq, hkv, hd) in SHAPES.items():
        for b in (1, 64, 256):
            same_everywhere &= one(name, hq, hkv, hd, b)
    print(f"GQA IDENTICAL {'yes' if same_everywhere else 'no'}", flush=True)


if __name__ == "__main__":
    main()
