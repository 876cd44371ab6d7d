"""The packed-cache decode kernel (batchlab/engine/kernels/quantized_decode.py) on the GPU:
its output against a float32 reference over the same dequantized keys, and its time per
layer against the dequantizing form it replaces and l1's bf16 masked attention.

Random bf16 keys and values, packed as the quantized caches pack them (``kv.pack``),
served as a strided view of a wider buffer (as a cache serves them), random left padding
as a boolean mask. Also tries mlx-lm's ``quantized_scaled_dot_product_attention`` on
contiguous arrays (whether MLX's CUDA ``quantized_matmul`` runs it, and its time).

    python3 tools/h200/qkv_decode_probe.py      # prints a table; last line QKV OK yes|no
"""

from __future__ import annotations

import time

import mlx.core as mx

from batchlab.engine.kernels import quantized_decode as qd
from batchlab.engine.paths.quantized.kv import KVQuant, pack, unpack

SHAPES = [  # name, query heads, KV heads, head dim
    ("llama-3.2-1b", 32, 8, 64),
    ("llama-3.1-8b", 32, 8, 128),
    ("qwen3-0.6b", 16, 8, 128),
]
CASES = [(1, 300), (64, 4096), (32, 2048), (256, 512)]  # (B, keys)


def timed(fn, reps: int = 20) -> float:
    mx.eval(fn())
    mx.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        mx.eval(fn())
    mx.synchronize()
    return (time.perf_counter() - t) / reps * 1e6


def reference(q, kd, vd, mask, scale):
    """float32 attention over dequantized keys (bf16 values upcast), masked."""
    g = q.shape[1] // kd.shape[1]
    k = mx.repeat(kd.astype(mx.float32), g, axis=1)
    v = mx.repeat(vd.astype(mx.float32), g, axis=1)
    s = (q.astype(mx.float32) * scale) @ k.swapaxes(-1, -2)
    s = mx.where(mask, s, -mx.inf)
    return mx.softmax(s, axis=-1, precise=True) @ v


def main() -> None:
    mx.random.seed(0)
    ok = True
    print("shape | bits/group | B | keys | max |err| fused | max |err| dequant+sdpa | "
          "fused us | dequant+sdpa us | l1 bf16 masked us | quantized_matmul us | packed MB")
    for name, hq, hkv, d in SHAPES:
        for bits, group in ((4, 64), (8, 64), (4, 32)):
            quant = KVQuant(bits=bits, group_size=group)
            for b, w in CASES:
                if d == 128 and b * w > 64 * 4096:
                    continue
                scale = d**-0.5
                q = mx.random.normal((b, hq, 1, d)).astype(mx.bfloat16)
                k = (mx.random.normal((b, hkv, w + 256, d)) * 1.5).astype(mx.bfloat16)
                v = mx.random.normal((b, hkv, w + 256, d)).astype(mx.bfloat16)
                kp_full, vp_full = pack(k, quant), pack(v, quant)
                mx.eval(kp_full, vp_full)
                kp, vp = kp_full[..., :w, :], vp_full[..., :w, :]  # served: a strided view
                pads = mx.random.randint(0, max(1, w // 3), (b,)) if b > 1 else mx.zeros((1,), mx.int32)
                mask = (mx.arange(w)[None] >= pads[:, None])[:, None, None, :]
                kt, vt = unpack(kp, quant, d, mx.bfloat16), unpack(vp, quant, d, mx.bfloat16)
                kd = mx.dequantize(*map(mx.contiguous, kt), group_size=group, bits=bits)
                vd = mx.dequantize(*map(mx.contiguous, vt), group_size=group, bits=bits)
                ref = reference(q, kd, vd, mask, scale)

                def fused():
                    return qd.quantized_decode_attention(q, kp, vp, scale, mask, d, group, bits)

                def dequant():
                    kk = mx.dequantize(*map(mx.contiguous, kt), group_size=group, bits=bits)
                    vv = mx.dequantize(*map(mx.contiguous, vt), group_size=group, bits=bits)
                    return mx.fast.scaled_dot_product_attention(q, kk, vv, scale=scale, mask=mask)

                kb, vb = k[..., :w, :], v[..., :w, :]

                def l1():
                    return mx.fast.scaled_dot_product_attention(q, kb, vb, scale=scale, mask=mask)

                if not qd.fits(q, kp, d, d, bits, group, mask):
                    print(f"{name} | {bits}/{group} | {b} | {w} | kernel does not take it")
                    continue
                out = fused()
                err = mx.abs(out.astype(mx.float32) - ref).max().item()
                err_dq = mx.abs(dequant().astype(mx.float32) - ref).max().item()
                # a bf16 output of values ~1 is within a few ulps (2^-8 each) of float32
                good = err <= 2 * max(err_dq, 2**-7)
                ok = ok and good
                qmm = "-"
                try:
                    from mlx_lm.models.base import quantized_scaled_dot_product_attention as qsdpa

                    kc = tuple(mx.contiguous(t) for t in kt)
                    vc = tuple(mx.contiguous(t) for t in vt)
                    mx.eval(kc, vc)
                    qmm = f"{timed(lambda: qsdpa(q, kc, vc, scale=scale, mask=mask, group_size=group, bits=bits)):.1f}"
                except Exception as exc:  # noqa: BLE001 - report what MLX's CUDA refuses
                    qmm = f"refused ({str(exc).splitlines()[0][:50]})"
                print(f"{name} | {bits}/{group} | {b} | {w} | {err:.2e}{'' if good else ' BAD'} | "
                      f"{err_dq:.2e} | {timed(fused):.1f} | {timed(dequant):.1f} | {timed(l1):.1f} | "
                      f"{qmm} | {(kp.nbytes + vp.nbytes) / 1e6:.1f}", flush=True)
    print(f"QKV OK {'yes' if ok else 'no'}")


if __name__ == "__main__":
    main()
