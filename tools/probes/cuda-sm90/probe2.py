"""Per-process probe (env set by the caller): host encode vs GPU wait of one decode step."""
import gc
import json
import os
import statistics as st
import sys
import time
from functools import partial

import mlx.core as mx

sys.path.insert(0, os.path.dirname(__file__))
from mlx_lm.generate import generation_stream
from probe_gpu import fwd, prefill, sync, time_gs, time_loop

from batchlab.bench.shapes import load_model


def encode_wait(model, P, n, comp):
    cache, tok = prefill(model, 1, P)
    kv = [a for c in cache for a in (c.keys[..., :c.offset, :], c.values[..., :c.offset, :])]
    off = cache[0].offset; b, e, w = [], [], []
    with mx.stream(generation_stream):
        for i in range(n):
            t0 = time.perf_counter()
            lp, *kv = comp(tok, mx.array(off, mx.int32), *kv)
            tok = mx.argmax(lp, axis=-1)
            t1 = time.perf_counter(); mx.async_eval(tok, kv)
            t2 = time.perf_counter(); sync(); t3 = time.perf_counter()
            off += 1
            b.append(t1 - t0); e.append(t2 - t1); w.append(t3 - t2)
    return [round(st.median(x[3:]) * 1e3, 3) for x in (b, e, w)]

name = sys.argv[1]
if mx.default_device() == mx.cpu:
    mx.disable_compile()
m = load_model(name).model
gc.disable()
comp = mx.compile(partial(fwd, m), shapeless=True)
eager = partial(fwd, m)
r = {"env": {k: v for k, v in os.environ.items() if k.startswith("MLX_")}}
r["enc_eager_ms"] = encode_wait(m, 128, 24, eager)
r["enc_comp_ms"] = encode_wait(m, 128, 24, comp)
for rep in range(5):
    r.setdefault("gs", []).append(time_gs(m, 128, 128))
    r.setdefault("comp1", []).append(time_loop(m, 1, 128, 128, comp))
    r.setdefault("eager1", []).append(time_loop(m, 1, 128, 128, eager))
for k in ("gs", "comp1", "eager1"):
    r[k] = round(st.median(r[k]) * 1e3, 3)
print(name, json.dumps(r), flush=True)
