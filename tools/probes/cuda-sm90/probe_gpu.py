"""Device probe: where a B=1 decode step goes on the GPU, and what a shapeless-compiled
unmasked decode (exact-width caches grown by concatenation) gains over generate_step."""
import gc
import json
import sys
import time
from functools import partial

import mlx.core as mx
from mlx_lm.generate import generate_step, generation_stream
from mlx_lm.models.cache import make_prompt_cache

from batchlab.bench.shapes import load_model


class GrowKV:
    def __init__(self, keys, values, offset):
        self.keys, self.values, self.offset = keys, values, offset
    def update_and_fetch(self, k, v):
        self.keys = mx.concatenate([self.keys, k], axis=2)
        self.values = mx.concatenate([self.values, v], axis=2)
        return self.keys, self.values
    def make_mask(self, N, return_array=False, window_size=None):
        return None

def fwd(model, inputs, offset, *kv):
    caches = [GrowKV(kv[i], kv[i+1], offset) for i in range(0, len(kv), 2)]
    logits = model(mx.expand_dims(inputs, 1), cache=caches).squeeze(1)
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return (lp, *[a for c in caches for a in (c.keys, c.values)])

def prefill(model, B, P):
    cache = make_prompt_cache(model)
    prompt = mx.random.randint(0, 1000, (B, P))
    logits = model(prompt, cache=cache)
    tok = mx.argmax(logits[:, -1, :], axis=-1)
    mx.eval(tok, [c.state for c in cache])
    return cache, tok

def sync():
    mx.synchronize(); mx.synchronize(generation_stream)

def time_gs(model, P, T):
    prompt = mx.random.randint(0, 1000, (P,))
    gen = generate_step(prompt, model, max_tokens=T + 1)
    next(gen); sync(); t = time.perf_counter()
    n = sum(1 for _ in gen); sync()
    return (time.perf_counter() - t) / n

def time_loop(model, B, P, T, comp):
    """Pipelined like generate_step: queue step n+1 before reading step n's token."""
    cache, tok = prefill(model, B, P)
    kv = [a for c in cache for a in (c.keys[..., :c.offset, :], c.values[..., :c.offset, :])]
    off = cache[0].offset
    with mx.stream(generation_stream):
        lp, *kv = comp(tok, mx.array(off, mx.int32), *kv)
        y = mx.argmax(lp, axis=-1); mx.async_eval(y)
        sync(); t = time.perf_counter()
        for _ in range(T):
            off += 1
            lp, *kv = comp(y, mx.array(off, mx.int32), *kv)
            y2 = mx.argmax(lp, axis=-1); mx.async_eval(y2)
            y.tolist(); y = y2
        y.tolist(); sync()
    return (time.perf_counter() - t) / T

def split_costs(model, B, P, n, comp):
    """Unpipelined: host build time vs eval time per step."""
    cache, tok = prefill(model, B, P)
    kv = [a for c in cache for a in (c.keys[..., :c.offset, :], c.values[..., :c.offset, :])]
    off = cache[0].offset
    build = ev = 0.0
    with mx.stream(generation_stream):
        for i in range(n):
            t0 = time.perf_counter()
            lp, *kv = comp(tok, mx.array(off, mx.int32), *kv)
            tok = mx.argmax(lp, axis=-1)
            t1 = time.perf_counter()
            mx.eval(tok, kv); t2 = time.perf_counter()
            off += 1
            if i >= 3: build += t1 - t0; ev += t2 - t1
    return build / (n - 3), ev / (n - 3)

def agreement(model, P, T, comp):
    """Teacher-forced against the plain KVCache forward: max |dlogprob|, same top-1."""
    cache, tok = prefill(model, 1, P)
    kv = [a for c in cache for a in (c.keys[..., :c.offset, :], c.values[..., :c.offset, :])]
    off = cache[0].offset; worst = 0.0; same = 0
    for _ in range(T):
        lp, *kv = comp(tok, mx.array(off, mx.int32), *kv)
        ref = model(tok[:, None], cache=cache)[:, -1, :]
        ref = ref - mx.logsumexp(ref, axis=-1, keepdims=True)
        worst = max(worst, mx.max(mx.abs(lp.astype(mx.float32) - ref.astype(mx.float32))).item())
        same += int(mx.argmax(lp, -1).item() == mx.argmax(ref, -1).item())
        tok = mx.argmax(ref, axis=-1); off += 1
    return worst, same / T

def main():
    if mx.default_device() == mx.cpu:
        mx.disable_compile()  # CPU rope falls back to slices: no shapeless trace here
    for name in sys.argv[1].split(","):
        m = load_model(name).model
        gc.disable()
        comp = mx.compile(partial(fwd, m), shapeless=True)
        eager = partial(fwd, m)
        r = {"agree": agreement(m, 128, 32, comp)}
        r["split_eager"] = split_costs(m, 1, 128, 20, eager)
        r["split_comp"] = split_costs(m, 1, 128, 20, comp)
        for rep in range(4):
            r.setdefault("gs", []).append(time_gs(m, 128, 128))
            for B in (1, 4, 8):
                r.setdefault(f"comp{B}", []).append(time_loop(m, B, 128, 128, comp))
            r.setdefault("eager1", []).append(time_loop(m, 1, 128, 128, eager))
        gc.enable()
        print(name, json.dumps(r), flush=True)
        del m, comp; gc.collect(); mx.clear_cache()

if __name__ == "__main__":
    main()
