"""Device experiment (not committed): where does l1 lose ~4% to BatchGenerator at B=1?"""
import statistics, sys
import mlx.core as mx, numpy as np
import batchlab.engine.kv as kv, batchlab.engine.mask as m
from batchlab.bench.shapes import load_model
from batchlab.bench.engines import run_l1, run_batch_generator
host = kv.causal_mask
def lazy(N, offset, left_padding=None, window=None, right_padding=None):
    lp = None if left_padding is None else mx.array(left_padding, dtype=mx.int32)
    return m._causal(mx, N, offset, lp, window, right_padding)
def ones(N, offset, left_padding=None, window=None, right_padding=None):
    if N == 1 and window is None and right_padding is None and not np.any(left_padding):
        return mx.ones((len(left_padding), 1, 1, offset + 1), dtype=mx.bool_)
    return host(N, offset, left_padding, window, right_padding)
variants = {"host": host, "lazy": lazy, "ones": ones}
for name in sys.argv[1].split(","):
    model = load_model(name).model
    for B in (1, 2):
        prompts = [[(i * 7 + b) % 1000 + 3 for i in range(128)] for b in range(B)]
        res = {}
        for rep in range(10):
            for v in (*variants, "BG"):
                if v == "BG":
                    r = run_batch_generator(model, prompts, 64)
                else:
                    kv.causal_mask = variants[v]
                    r = run_l1(model, prompts, 64)
                if rep:
                    res.setdefault(v, []).append(r.step_s * 1e3)
        kv.causal_mask = host
        med = {k: statistics.median(v) for k, v in res.items()}
        print(name, B, {k: round(v, 3) for k, v in med.items()},
              {k: round(med["BG"] / v, 3) for k, v in med.items()}, flush=True)
