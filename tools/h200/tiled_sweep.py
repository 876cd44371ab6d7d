"""Issue 28, item 3: the tiled decode kernel's launch settings on the H200 (warps a block,
key loads and value rows in flight), us a call at the bench's large-B shapes, then the
best setting and the module's in fast's decode step against the looped kernel, paired in
one process (llama-3.1-8b B=256, 128 + 128 tokens).

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/tiled_sweep.py
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import mlx.core as mx
from gqa_exact_probe import BF, inputs, timed  # tools/h200, first on sys.path
from paired import paired_steps

from batchlab.engine.kernels import grouped_decode as gd
from batchlab.engine.kernels import grouped_decode_tiled as tiled

SHAPES = (("llama-3.1-8b", 32, 8, 128, 256, 192), ("llama-3.1-8b", 32, 8, 128, 256, 255),
          ("llama-3.2-1b", 32, 8, 64, 256, 192), ("qwen3-0.6b", 16, 8, 128, 256, 192))
SETTINGS = list(itertools.product((1, 2, 4), (2, 4, 8), (4, 8, 16)))  # warps, KL, VL


def main() -> None:
    arrays = []
    for _, hq, hkv, dim, b, keys in SHAPES:
        q, kbuf, vbuf = inputs(b, hq, hkv, dim, BF, keys, 256)
        k, v = kbuf[:, :, :keys], vbuf[:, :, :keys]
        mx.eval(q, k, v)
        arrays.append((q, k, v, dim ** -0.5))
    default = (tiled.WARPS, tiled.KEY_LOADS, tiled.VALUE_LOADS)
    print("warps KL VL  " + "  ".join(f"{s[0][:8]}/{s[5]}" for s in SHAPES) + "  sum", flush=True)
    totals = {}
    for warps, kl, vl in SETTINGS:
        tiled.KEY_LOADS, tiled.VALUE_LOADS = kl, vl
        us = [timed(lambda q=q, k=k, v=v, sc=sc, w=warps:
                    tiled.tiled_decode_attention(q, k, v, sc, w))
              for q, k, v, sc in arrays]
        totals[(warps, kl, vl)] = sum(us)
        print(f"{warps:5d} {kl:2d} {vl:2d}  " + "  ".join(f"{u:12.1f}" for u in us)
              + f"  {sum(us):.1f}", flush=True)
    best = min(totals, key=totals.get)
    print(f"best {best} {totals[best]:.1f} us; module default {default} {totals[default]:.1f}",
          flush=True)

    @contextmanager
    def variant(name: str):
        setting = {"looped": default, "tiled": default, "tiled-best": best}[name]
        gd.TILED = name != "looped"
        tiled.WARPS, tiled.KEY_LOADS, tiled.VALUE_LOADS = setting
        yield

    paired_steps("llama-3.1-8b", 256, 3, ["looped", "tiled", "tiled-best"], variant)


if __name__ == "__main__":
    main()
