"""Issue 28, item 3: the kernels of one decode step of a path, for Nsight Compute.

Runs a path's scheduler on a bench shape (B prompts of 128 tokens, greedy), decodes
``warm`` steps (the cache then holds 128 + warm keys), syncs, and brackets exactly one
more ``step()`` (one decode forward, its sampling, their launches) with
``cudaProfilerStart`` / ``Stop``, so ``ncu --profile-from-start off`` times that step's
kernels alone, each serialized on the device. The step's host time (no profiler) is
printed too: the same step un-instrumented, median of 16.

    ncu --profile-from-start off --clock-control none --cache-control none \\
        --metrics gpu__time_duration.sum --csv --page raw --log-file k.csv \\
        python3 tools/h200/step_kernels.py llama-3.1-8b 256 fast [warm]
"""

from __future__ import annotations

import ctypes
import glob
import statistics
import sys
import time

from batchlab.bench.engines import sync
from batchlab.bench.measure import make_prompts
from batchlab.bench.shapes import load_model
from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.paths.registry import PATHS


def cudart():
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    names += glob.glob("/tmp/site/**/libcudart.so*", recursive=True)
    names += glob.glob("/usr/local/lib/python3*/*-packages/nvidia/**/libcudart.so*",
                       recursive=True)
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("no libcudart found")


def main() -> None:
    name, batch, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    warm = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    loaded = load_model(name)
    prompts = make_prompts(batch, 128, loaded.vocab_size, seed=0)
    scheduler = PATHS[path].scheduler(
        loaded.model, ScheduleConfig(prefill_batch_size=batch, completion_batch_size=batch))
    scheduler.insert([Request(name=f"r{i}", prompt=tuple(p), max_tokens=warm + 40)
                      for i, p in enumerate(prompts)])
    while len(scheduler.decode) < batch:
        scheduler.step()
    for _ in range(warm):
        scheduler.step()
    sync()
    times = []
    for _ in range(16):  # pipelined steps, as the bench runs them
        start = time.perf_counter()
        scheduler.step()
        times.append(time.perf_counter() - start)
    sync()
    lib = cudart()
    lib.cudaProfilerStart()
    scheduler.step()
    sync()
    lib.cudaProfilerStop()
    print(f"{name} B={batch} {path}: host time of a pipelined step() "
          f"{statistics.median(times) * 1e3:.2f} ms (median of 16)", flush=True)


if __name__ == "__main__":
    main()
