"""Issue 28, item 2: fast's one-row step as one kernel for all the layers
(``BATCHLAB_FAST_PERSISTENT=1``: ``kernels/row_step.py``, ``paths/fast/persistent_decode.py``)
on the H200: right, repeatable, faster?

Part ``fast``: fast's scheduler at B = 1 with the kernel against fast without it (random
weights, greedy), in two scripts:

- ``alone``: one row, prompt 64, 300 steps (past the cache's 256-column growth);
- ``left``: row A (prompt 64, 120 tokens), row B (prompt 35) joining at step 20 and
  decoding on alone after A ends: B is left-padded in the shared cache, and the cache
  trimmed to it holds a strided view, so the kernel's in-place write needs its own
  buffer (``RowStep._own_buffers``).

Per model and script: the share of equal top-1 tokens and the KL while the tokens agree,
the steps the kernel took (``PERSISTENT STEPS``, never 0), and the kernel's run twice
(``PERSISTENT REPEAT yes`` when every run gave the same bytes).

Part ``stream``: the kernel's switches against its defaults: the products through
``stream_pairs`` (``BATCHLAB_ROW_STEP_STREAM=4``), the values loaded key by key
(``..._VALUES_AHEAD=0``), 16 warps a block (``..._WARPS=16``), the merge slice by slice
(``..._MERGE=1``): the same bytes on both scripts (``STREAM SAME yes``). Time them with
``row_step_ab.py`` (part ``time`` evaluates each call alone: the host's sync, not the
kernel, at these sizes).

Part ``time``: us a call of the kernel alone (eval'd one at a time) on llama-3.2-1b and
qwen3-0.6b (every layer), with the weight bytes a call reads and the rate.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/row_step_probe.py [fast|time|stream|all]
        [models, for stream: llama-3.2-1b@L3 qwen3-0.6b@L3 llama-3.2-1b by default]
"""

from __future__ import annotations

import os
import sys

import mlx.core as mx
import numpy as np

sys.path.insert(0, "tools/h200")
from gqa_exact_probe import F32, timed
from tiled_probe import against

ENV = "BATCHLAB_FAST_PERSISTENT"


def run(model, vocab: int, script: str) -> tuple[list, int]:
    """(emissions, steps the kernel took) of fast's scheduler on ``script``."""
    from batchlab.engine.core.batch import Request
    from batchlab.engine.core.config import ScheduleConfig
    from batchlab.engine.paths.fast import persistent_decode
    from batchlab.engine.paths.registry import PATHS

    taken = [0]
    real = persistent_decode.RowStep.logits

    def counted(self, *a):
        taken[0] += 1
        return real(self, *a)

    persistent_decode.RowStep.logits = counted
    try:
        rng = np.random.default_rng([7, len(script)])
        a = rng.integers(0, vocab, size=64).tolist()
        b = rng.integers(0, vocab, size=35).tolist()
        sched = PATHS["fast"].scheduler(
            model, ScheduleConfig(prefill_batch_size=2, completion_batch_size=2))
        alone = script == "alone"
        sched.insert([Request(name="a", prompt=tuple(a), max_tokens=300 if alone else 120)])
        out, n = [], 0
        while sched.num_active:
            for e in sched.step():
                out.append((e.name, e.token, np.array(e.logprobs.astype(F32)).tobytes()))
            n += 1
            if n == 20 and not alone:
                sched.insert([Request(name="b", prompt=tuple(b), max_tokens=260)])
        return out, taken[0]
    finally:
        persistent_decode.RowStep.logits = real


def fast_part() -> bool:
    from batchlab.bench.shapes import load_model
    from batchlab.engine.kernels import row_step

    # the launch's blocks: the driver's SM count (None: the fallback, row_step.SMS)
    print(f"sm_count {row_step.sm_count()}, blocks {row_step.blocks()}", flush=True)
    ok_all = True
    for name in ("llama-3.2-1b@L3", "qwen3-0.6b@L3", "llama-3.1-8b@L2", "llama-3.2-1b"):
        loaded = load_model(name)
        for script in ("alone", "left"):
            runs, taken = {}, {}
            for label, flag in (("plain", "0"), ("kernel", "1"), ("kernel again", "1")):
                os.environ[ENV] = flag
                runs[label], taken[label] = run(loaded.model, loaded.vocab_size, script)
            os.environ[ENV] = "0"
            repeat = runs["kernel"] == runs["kernel again"]
            ok_all &= repeat and taken["kernel"] > 0 and taken["plain"] == 0
            print(f"fast {name} {script}: {len(runs['kernel'])} emissions, the kernel took "
                  f"{taken['kernel']} steps; against fast without it, "
                  f"{against(runs['plain'], runs['kernel'])}; twice the same bytes: {repeat}",
                  flush=True)
    print(f"PERSISTENT REPEAT {'yes' if ok_all else 'no'}", flush=True)
    return ok_all


def stream_part() -> bool:
    from batchlab.bench.shapes import load_model
    from batchlab.engine.kernels import row_step

    # the switches against the defaults (the same sums): the products streamed (4 chunks
    # a batch), the values loaded key by key, 16 warps a block (the same sums where a
    # norm's input is at most a chunk a thread of 8 warps: these models), the merge slice
    # by slice
    STREAM_VARIANTS = {"0": {}, "4": {row_step.STREAM_ENV: "4"},
                       "va0": {row_step.VALUES_AHEAD_ENV: "0"},
                       "w16": {row_step.WARPS_ENV: "16"},
                       "mg": {row_step.MERGE_ENV: "1"}}
    same = True
    for name in sys.argv[2:] or ("llama-3.2-1b@L3", "qwen3-0.6b@L3", "llama-3.2-1b"):
        loaded = load_model(name)
        for script in ("alone", "left"):
            runs = {}
            for variant, env in STREAM_VARIANTS.items():
                os.environ.update(env)
                runs[variant], taken = run(loaded.model, loaded.vocab_size, script)
                for key in env:
                    os.environ.pop(key)
                same &= taken > 0
            others = list(STREAM_VARIANTS)[1:]
            equal = [runs[v] == runs["0"] for v in others]
            same &= all(equal)
            print(f"stream {name} {script}: {len(runs['0'])} emissions; {', '.join(others)} "
                  f"the bytes of 0: {equal}", flush=True)
    print(f"STREAM SAME {'yes' if same else 'no'}", flush=True)
    os.environ[ENV] = "0"
    return same


def time_part() -> bool:
    from batchlab.bench.shapes import load_model
    from batchlab.engine.caches.kv import BatchKV
    from batchlab.engine.paths.fast.persistent_decode import RowStep

    for name in ("llama-3.2-1b", "qwen3-0.6b"):
        model = load_model(name).model
        step = RowStep(model)
        hidden, dim, n_q, n_kv, inter, layers = step.shape
        dtype = step.weights[0][1].dtype
        caches = []
        for _ in range(layers):
            c = BatchKV([0])
            c.update_and_fetch(mx.random.normal((1, n_kv, 200, dim)).astype(dtype),
                               mx.random.normal((1, n_kv, 200, dim)).astype(dtype))
            caches.append(c)
        tokens = mx.array([5], dtype=mx.int32)

        def one(step=step, tokens=tokens, caches=caches):
            # the same column each call: the step's cost without the cache moving on
            out = step.logits(tokens, caches)
            for c in caches:
                c._idx -= 1
                c.offset_ints.shift(-1)
            return out

        gbytes = sum(w.nbytes for ws in step.weights for w in ws) / 1e9
        t = timed(one)
        print(f"{name:14s} step (kernel + embed + head) {t:8.1f} us; layer weights "
              f"{gbytes:.3f} GB ({gbytes / t * 1e3:.2f} TB/s over the whole step)", flush=True)
    return True


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    ok = True
    for part, fn in (("fast", fast_part), ("time", time_part), ("stream", stream_part)):
        if what in (part, "all") and not (part == "stream" and what == "all"):
            ok &= fn()
    sys.exit(0 if ok else 1)
