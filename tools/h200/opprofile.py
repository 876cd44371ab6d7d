"""Issue 28, item 3: where a decode step of llama-3.1-8b at B=256 spends its device time.

Times each kernel class of one decode step alone on the GPU, at the shapes the bench
runs (B=256, prompt 128, 128 generated: keys 129..256, the cache buffer 512 columns
wide as BatchKV grows it), with random bf16 inputs (never zeros) rotated over several
copies so no weight sits in L2 between repeats. Each figure: the median over 7 rounds
of (wall time of N launches, then one sync) / N, after a warm-up round. Bytes are the
fewest each op must move (inputs read once, outputs written once); GB/s = bytes / time.

Then a step's device floor is the per-layer sum x 32 plus the head, to set beside the
bench's ms/step (the rest is host time the device did not hide, or gaps).

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/opprofile.py [B] [keys]
"""

from __future__ import annotations

import statistics
import sys
import time

import mlx.core as mx

B = int(sys.argv[1]) if len(sys.argv) > 1 else 256
KEYS = int(sys.argv[2]) if len(sys.argv) > 2 else 192  # mean keys over the 128-step window
HID, HEADS, KVH, HD, INTER, VOCAB, LAYERS = 4096, 32, 8, 128, 14336, 128256, 32
WIDTH = 512  # BatchKV's buffer: 128 + 128 columns grown in steps of 256
COPIES = 4
DT = mx.bfloat16


def rnd(*shape, dtype=DT):
    return (mx.random.normal(shape) * 0.02).astype(dtype)


def timed(fn, args_list, n=24, rounds=7) -> float:
    """Median seconds per call of fn over rotated args (lazy outputs evaluated in one go)."""
    outs = [fn(*args_list[i % len(args_list)]) for i in range(4)]
    mx.eval(outs)
    mx.synchronize()
    per = []
    for _ in range(rounds):
        start = time.perf_counter()
        outs = [fn(*args_list[i % len(args_list)]) for i in range(n)]
        mx.eval(outs)
        mx.synchronize()
        per.append((time.perf_counter() - start) / n)
        del outs
    return statistics.median(per)


rows = []


def report(name: str, seconds: float, nbytes: float, per_step: int) -> None:
    rows.append((name, seconds, nbytes, per_step))
    print(f"{name:48s} {seconds * 1e6:9.1f} us  {nbytes / 1e6:9.1f} MB  "
          f"{nbytes / seconds / 1e9:7.0f} GB/s  x{per_step}", flush=True)


def main() -> None:
    mx.random.seed(0)
    print(f"llama-3.1-8b shapes, B={B}, keys={KEYS} (buffer {WIDTH}), bf16; "
          f"device {mx.default_device()}")
    x = [(rnd(B, HID),) for _ in range(COPIES)]
    for name, out_f, in_f, per in [("q_proj / o_proj 4096x4096", HID, HID, 2),
                                   ("k_proj / v_proj 1024x4096", KVH * HD, HID, 2),
                                   ("gate / up 14336x4096", INTER, HID, 2),
                                   ("down 4096x14336", HID, INTER, 1)]:
        ws = [rnd(out_f, in_f) for _ in range(COPIES)]
        xs = [(rnd(B, in_f), w) for w in ws]
        t = timed(lambda a, w: a @ w.T, xs)
        report(f"GEMM {name} M={B}", t, 2 * (out_f * in_f + B * (in_f + out_f)), per)
        del ws, xs
    # issue 28, h200d: the same projections as one GEMM per group (fast on CUDA)
    for name, out_f, in_f in [("q/k/v fused 6144x4096", HID + 2 * KVH * HD, HID),
                              ("gate/up fused 28672x4096", 2 * INTER, HID)]:
        ws = [rnd(out_f, in_f) for _ in range(COPIES)]
        xs = [(rnd(B, in_f), w) for w in ws]
        t = timed(lambda a, w: a @ w.T, xs)
        report(f"ALT GEMM {name} M={B}", t, 2 * (out_f * in_f + B * (in_f + out_f)), 1)
        del ws, xs
    # attention: q (B, 32, 1, 128) over k/v views (B, 8, KEYS, 128) of a WIDTH buffer
    bufs = [(rnd(B, KVH, WIDTH, HD), rnd(B, KVH, WIDTH, HD)) for _ in range(2)]
    qs = [rnd(B, HEADS, 1, HD) for _ in range(2)]
    kv_bytes = 2 * B * KVH * KEYS * HD * 2
    mask = mx.ones((B, 1, 1, KEYS), dtype=mx.bool_)
    sdpa = mx.fast.scaled_dot_product_attention
    args = [(qs[i], bufs[i][0], bufs[i][1]) for i in range(2)]
    t = timed(lambda q, k, v: sdpa(q, k[..., :KEYS, :], v[..., :KEYS, :], scale=0.088), args)
    report("SDPA fused, no mask (fast), view of buffer", t, kv_bytes, 1)
    t = timed(lambda q, k, v: sdpa(q, k[..., :KEYS, :], v[..., :KEYS, :], scale=0.088,
                                   mask=mask), args)
    report("SDPA with bool mask (l1, BatchGenerator)", t, kv_bytes, 1)
    from batchlab.engine.kernels.grouped_decode import grouped_decode_attention

    t = timed(lambda q, k, v: grouped_decode_attention(q, k[..., :KEYS, :], v[..., :KEYS, :],
                                                       0.088, None), args)
    report("ALT grouped decode kernel (fast, h200d), view", t, kv_bytes, 1)
    cont = [(qs[i], mx.contiguous(bufs[i][0][..., :KEYS, :]),
             mx.contiguous(bufs[i][1][..., :KEYS, :])) for i in range(2)]
    mx.eval(cont)
    t = timed(lambda q, k, v: sdpa(q, k, v, scale=0.088), cont)
    report("SDPA fused, no mask, contiguous keys", t, kv_bytes, 1)
    del cont
    # the cache write: one column into the (B, 8, WIDTH, 128) buffers, in place or copied
    new = rnd(B, KVH, 1, HD)

    def write(buf):
        buf[..., KEYS : KEYS + 1, :] = new
        return buf

    kb = [rnd(B, KVH, WIDTH, HD) for _ in range(2)]
    t = timed(lambda b: write(b), [(b,) for b in kb])
    report("cache write, 1 column (slice update)", t, 2 * B * KVH * HD * 2, 2)
    del kb, bufs
    # the elementwise / normalization ops of a layer
    h = [(rnd(B, HID),) for _ in range(COPIES)]
    w = rnd(HID)
    t = timed(lambda a: mx.fast.rms_norm(a, w, 1e-5), h)
    report("rms_norm (B, 4096)", t, 2 * 2 * B * HID, 2)
    t = timed(lambda a: a + a, h)
    report("residual add (B, 4096)", t, 3 * 2 * B * HID, 2)
    g = [(rnd(B, INTER), rnd(B, INTER)) for _ in range(2)]
    t = timed(lambda a, b: (a * mx.sigmoid(a)) * b, g)
    report("silu(gate) * up (B, 14336), unfused", t, 3 * 2 * B * INTER, 1)
    qr = [(rnd(B, HEADS, 1, HD),) for _ in range(2)]
    offs = mx.arange(B, dtype=mx.int32) + KEYS
    t = timed(lambda a: mx.fast.rope(a, HD, traditional=False, base=500000.0, scale=1.0,
                                     offset=offs), qr)
    report("rope q (B, 32, 1, 128), per-row offsets", t, 2 * 2 * B * HEADS * HD, 2)
    # the head: lm_head GEMM, logsumexp over the vocabulary, argmax
    wh = [rnd(VOCAB, HID) for _ in range(2)]
    t = timed(lambda a, w: a @ w.T, [(x[i][0], wh[i]) for i in range(2)], n=8)
    report("GEMM lm_head 128256x4096", t, 2 * (VOCAB * HID + B * (HID + VOCAB)), 1)
    del wh
    lg = [(rnd(B, VOCAB, dtype=mx.float32),) for _ in range(2)]
    lgb = [(rnd(B, VOCAB),) for _ in range(2)]
    t = timed(lambda a: a - mx.logsumexp(a, axis=-1, keepdims=True), lgb, n=8)
    report("logprobs = logits - logsumexp (B, V) bf16", t, 2 * 2 * B * VOCAB, 1)
    t = timed(lambda a: mx.argmax(a, axis=-1), lgb, n=8)
    report("argmax (B, V)", t, 2 * B * VOCAB, 1)
    del lg, lgb
    print()
    head = {"GEMM lm_head 128256x4096", "logprobs = logits - logsumexp (B, V) bf16",
            "argmax (B, V)"}
    total = 0.0
    groups: dict[str, float] = {}
    for name, sec, _, per in rows:
        if "contiguous" in name or "bool mask" in name or name.startswith("ALT "):
            continue
        step = sec * per * (1 if name in head else LAYERS)
        total += step
        key = ("GEMMs" if name.startswith("GEMM") else "attention" if "SDPA" in name
               else "cache write" if "cache" in name else "head" if name in head
               else "elementwise and norms")
        groups[key] = groups.get(key, 0.0) + step
    masked = next(s for n, s, _, _ in rows if "bool mask" in n)
    fused = next(s for n, s, _, _ in rows if "no mask (fast), view" in n)
    print(f"device floor of a fast decode step (sum of the ops alone): {total * 1e3:.2f} ms")
    for key, sec in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {key:24s} {sec * 1e3:7.2f} ms  {100 * sec / total:5.1f}%")
    print(f"l1 / BatchGenerator (masked attention) add {(masked - fused) * LAYERS * 1e3:.2f} ms")
    weights = 2 * (LAYERS * (2 * HID * HID + 2 * KVH * HD * HID + 3 * HID * INTER)
                   + VOCAB * HID)
    kv = LAYERS * 2 * B * KVH * KEYS * HD * 2
    print(f"bytes a step must move: weights {weights / 1e9:.2f} GB + KV {kv / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
