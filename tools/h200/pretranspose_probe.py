"""Issue 28 item 2: does ``BATCHLAB_FAST_PRETRANSPOSE=1`` keep the fast path's bits?

The ``fast`` path's scheduler on bench shapes (real widths, few layers, random weights,
greedy), B=1 and a ragged batch with rows finishing at different steps and a join, once
with ``BATCHLAB_FAST_PRETRANSPOSE=0`` and once with ``=1``: every emitted token and the
bytes of every logprobs vector must be equal (``PRETRANSPOSE SAME yes``), and the clone
must have run (its ``PretransposedLinear`` calls counted). Its nodes per decode submit:
``BATCHLAB_FAST_PRETRANSPOSE=1 python3 tools/h200/opcount.py <shape> fast``.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/pretranspose_probe.py [shape ...]

On the CPU the fast path does not build the clone (CUDA only): ``--force`` builds it
there too (the check of this script itself).
"""

from __future__ import annotations

import os
import sys

import mlx.core as mx
import numpy as np

from batchlab.engine.paths.fast import path as fast
from batchlab.engine.paths.fast import pretransposed as pt

SHAPES = ("llama-3.2-1b@L3", "qwen3-0.6b@L3", "llama-3.1-8b@L2")


def run_fast(model, on: str, batch: int, plen: int, steps: int, vocab: int):
    from batchlab.engine.core.batch import Request
    from batchlab.engine.core.config import ScheduleConfig

    os.environ[pt.PRETRANSPOSE_ENV] = on
    rng = np.random.default_rng([batch, plen])
    prompts = rng.integers(0, vocab, size=(batch, plen)).tolist()
    late = rng.integers(0, vocab, size=(plen // 2 + 3,)).tolist()
    sched = fast.FastScheduler(
        model, ScheduleConfig(prefill_batch_size=batch, completion_batch_size=batch + 1))
    sched.insert([Request(name=f"r{i}", prompt=tuple(p), max_tokens=max(4, steps - 2 * i))
                  for i, p in enumerate(prompts)])
    out, n = [], 0
    while sched.num_active:
        for e in sched.step():
            out.append((e.name, e.token, np.array(e.logprobs.astype(mx.float32)).tobytes()))
        n += 1
        if batch > 1 and n == steps // 2:
            sched.insert([Request(name="late", prompt=tuple(late), max_tokens=8)])
    return out


def main() -> int:
    from batchlab.bench.shapes import load_model

    args = [a for a in sys.argv[1:] if a != "--force"]
    if "--force" in sys.argv:
        fast.on_cuda = lambda: True  # the clone on any backend (GQA off: no kernel here)
        os.environ["BATCHLAB_FAST_GQA"] = "0"
    calls = [0]
    real = pt.PretransposedLinear.__call__

    def counted(self, x):
        calls[0] += 1
        return real(self, x)

    pt.PretransposedLinear.__call__ = counted
    ok_all = True
    for name in args or SHAPES:
        loaded = load_model(name)
        for batch, plen, steps in ((1, 40, 24), (8, 30, 20)):
            runs = {}
            for on in ("0", "1"):
                calls[0] = 0
                runs[on] = (run_fast(loaded.model, on, batch, plen, steps, loaded.vocab_size),
                            calls[0])
            (off, c_off), (on_, c_on) = runs["0"], runs["1"]
            same = len(off) == len(on_) and all(a == b for a, b in zip(off, on_, strict=True))
            ok = same and c_on > 0 and c_off == 0
            ok_all &= ok
            print(f"{name} B={batch}: {len(on_)} emissions, clone calls {c_on} (off {c_off}); "
                  f"tokens and logprobs equal: {same}", flush=True)
    print(f"PRETRANSPOSE SAME {'yes' if ok_all else 'no'}", flush=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
