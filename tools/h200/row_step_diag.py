"""Where a row_step call's time goes: the host's build and the eval of a step, then the
kernel alone, at 132 and 66 blocks, with ``BATCHLAB_ROW_STEP_SKIP`` (32: no grid
barriers; 31: barriers only) and with the barrier in groups (``BATCHLAB_ROW_STEP_GROUPS``
6, 12, 24), on llama-3.2-1b at 4 layers and at 16.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/row_step_diag.py
"""

from __future__ import annotations

import os
import time

import mlx.core as mx

from batchlab.bench.shapes import load_model
from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.kernels import row_step
from batchlab.engine.paths.persistent_decode import RowStep


def caches_for(step, width=200):
    hidden, dim, n_q, n_kv, inter, layers = step.shape
    dtype = step.weights[0][1].dtype
    out = []
    for _ in range(layers):
        c = BatchKV([0])
        zeros = mx.zeros((1, n_kv, width, dim), dtype)
        c.update_and_fetch(zeros, zeros)
        out.append(c)
    mx.eval([c.keys for c in out])
    return out


for name in ("llama-3.2-1b@L4", "llama-3.2-1b"):
    model = load_model(name).model
    step = RowStep(model)
    caches = caches_for(step)
    tokens = mx.array([5], dtype=mx.int32)
    for blocks, skip, groups in (("132", "0", "0"), ("66", "0", "0"), ("132", "32", "0"),
                                 ("132", "31", "0"), ("132", "0", "12"), ("132", "31", "12"),
                                 ("132", "0", "6"), ("132", "0", "24")):
        if name != "llama-3.2-1b@L4" and (skip != "0" or groups not in ("0", "12")):
            continue
        os.environ[row_step.BLOCKS_ENV] = blocks
        os.environ[row_step.SKIP_ENV] = skip
        os.environ[row_step.GROUPS_ENV] = groups
        for _ in range(3):
            mx.eval(step.logits(tokens, caches))
        build, run = [], []
        for _ in range(10):
            t0 = time.perf_counter()
            out = step.logits(tokens, caches)
            t1 = time.perf_counter()
            mx.eval(out)
            t2 = time.perf_counter()
            build.append((t1 - t0) * 1e3)
            run.append((t2 - t1) * 1e3)
        build.sort()
        run.sort()
        print(f"{name:18s} blocks {blocks:>3s} skip {skip:>2s} groups {groups:>2s}: build "
              f"{build[5]:.3f} ms, eval {run[5]:.3f} ms (min {run[0]:.3f})", flush=True)
        # the kernel alone, its inputs evaluated first
        hidden, dim, n_q, n_kv, inter, layers = step.shape
        h = step.embed(tokens)
        first = caches[0]
        meta = mx.array([first._idx, 0, first._idx, first.keys.shape[2]], dtype=mx.int32)
        arrays = []
        for w, c in zip(step.weights, caches):
            arrays += [*w, c.keys, c.values]
        mx.eval(h, meta)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            mx.eval(row_step.step(h, meta, step.barrier, step.consts, step.inv_freq, arrays,
                                  step.shape, step.head_norms))
            ts.append((time.perf_counter() - t0) * 1e3)
        ts.sort()
        print(f"{'':18s} kernel alone: {ts[2]:.3f} ms (min {ts[0]:.3f})", flush=True)
