"""Where a row_step call's time goes: the host's build and the eval of a step, then the
kernel alone, on llama-3.2-1b at 4 layers and at 16, under the probe switches:
``BATCHLAB_ROW_STEP_SKIP`` (a phase's work skipped, one at a time: the phase's share;
32: no grid barriers; 31: barriers only), ``BATCHLAB_ROW_STEP_BARRIER`` (1: release /
acquire), ``BATCHLAB_ROW_STEP_PREFETCH`` (0: no L2 prefetch) and
``BATCHLAB_ROW_STEP_BLOCKS``. (The nineteenth round's first run also took the barrier in
groups, ``groups 12``, since taken out: ``issue28-persistent/s49/r1-diag.log``.)

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/row_step_diag.py [blocks]
"""

from __future__ import annotations

import os
import sys
import time

import mlx.core as mx

from batchlab.bench.shapes import load_model
from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.kernels import row_step
from batchlab.engine.paths.fast.persistent_decode import RowStep


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


SWITCHES = {"blocks": row_step.BLOCKS_ENV, "skip": row_step.SKIP_ENV,
            "bar": row_step.BARRIER_ENV,
            "pf": row_step.PREFETCH_ENV}
BASE = {"blocks": "132", "skip": "0", "bar": "0", "pf": "1"}
# ``blocks`` (nineteenth round, second machine): two blocks an SM against one
BLOCK_SETTINGS = {
    "llama-3.2-1b": [{}, {"blocks": "264"}, {"blocks": "198"}, {"blocks": "264", "pf": "0"},
                     {"blocks": "264", "bar": "1"}, {"skip": "31"}, {"skip": "31", "blocks": "264"},
                     {}, {"blocks": "264"}],
}
SETTINGS = {  # each model's settings, changes from BASE
    "llama-3.2-1b@L4": [{}, {"pf": "0"}, {"bar": "1"}, {"skip": "32"}, {"skip": "31"},
                        {"skip": "31", "bar": "1"}],
    "llama-3.2-1b": [{}, {"pf": "0"}, {"bar": "1"}, {"bar": "1", "pf": "0"},
                     {"blocks": "66"}, {"skip": "1"}, {"skip": "2"},
                     {"skip": "4"}, {"skip": "8"}, {"skip": "16"}, {"skip": "31"},
                     {"skip": "31", "bar": "1"}, {"skip": "32"}, {}, {"pf": "0"}],
}

def main() -> None:
    for name, settings in (BLOCK_SETTINGS if sys.argv[1:] == ["blocks"] else SETTINGS).items():
        model = load_model(name).model
        step = RowStep(model)
        caches = caches_for(step)
        tokens = mx.array([5], dtype=mx.int32)
        for change in settings:
            setting = {**BASE, **change}
            for key, value in setting.items():
                os.environ[SWITCHES[key]] = value
            label = " ".join(f"{k} {v:>3s}" for k, v in setting.items())
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
            print(f"{name:16s} {label}: build {build[5]:.3f} ms, eval {run[5]:.3f} ms "
                  f"(min {run[0]:.3f})", flush=True)
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
            for _ in range(9):
                t0 = time.perf_counter()
                mx.eval(row_step.step(h, meta, step.barrier, step.consts, step.inv_freq, arrays,
                                      step.shape, step.head_norms))
                ts.append((time.perf_counter() - t0) * 1e3)
            ts.sort()
            print(f"{'':16s} kernel alone: {ts[4]:.3f} ms (min {ts[0]:.3f})", flush=True)


if __name__ == "__main__":
    main()
