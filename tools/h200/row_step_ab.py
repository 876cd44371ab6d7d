"""Issue 28, item 2: fast's one-kernel step (``row_step``) with its probe switches toggled
in one process, interleaved (``row_step`` reads its environment at every call), so the
variants share the process, the allocator and the device's state: a paired A/B finer than
separate ``batchlab bench`` processes, whose B = 1 step drifts by up to 1.3x for the same
code (reports/bench/cuda-sm90/issue28-one-row/).

A variant is a name and its switches, ``name:key=value/key=value``; the keys are
``stream`` (``BATCHLAB_ROW_STEP_STREAM``), ``ahead`` (``..._VALUES_AHEAD``), ``warps``
(``..._WARPS``), ``keys`` (``..._KEYS_A_SPLIT``), ``merge`` (``..._MERGE``), ``blocks``,
``prefetch`` and ``barrier``. ``blocks`` past the SMs
needs a kernel of at most 128 registers a thread (two blocks an SM, all resident:
``row_step_compile_check.py``), or the grid barrier never opens; so does ``warps=16``
alone, and the two never together. Unset switches keep row_step's defaults.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/row_step_ab.py [--model llama-3.2-1b] \
        [--rounds 5] default stream4:stream=4 va0:ahead=0

Prints each variant's ms/step per round (128 prompt + 128 generated tokens, greedy, a
warm-up run of each first), then the median and its median ratio to the first variant.
"""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager
from unittest import mock

from paired import paired_steps  # tools/h200, first on sys.path when run as a script

from batchlab.engine.kernels import row_step

KEYS = {"stream": row_step.STREAM_ENV, "ahead": row_step.VALUES_AHEAD_ENV,
        "warps": row_step.WARPS_ENV, "keys": row_step.KEYS_A_SPLIT_ENV,
        "merge": row_step.MERGE_ENV, "blocks": row_step.BLOCKS_ENV,
        "prefetch": row_step.PREFETCH_ENV, "barrier": row_step.BARRIER_ENV}


def parse(spec: str) -> tuple[str, dict[str, str]]:
    """``name:key=value/key=value`` as (name, the environment it sets)."""
    name, _, switches = spec.partition(":")
    env = {}
    for item in filter(None, switches.split("/")):
        key, _, value = item.partition("=")
        if key not in KEYS or not value:
            raise SystemExit(f"{spec!r}: each switch is key=value, key one of {sorted(KEYS)}")
        env[KEYS[key]] = value
    return name, env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("variants", nargs="+")
    args = ap.parse_args()
    variants = dict(parse(spec) for spec in args.variants)
    os.environ["BATCHLAB_FAST_PERSISTENT"] = "1"  # the kernel on whatever the model's size

    @contextmanager
    def variant(name: str):
        with mock.patch.dict(os.environ):  # the environment as it was, afterwards
            for key in KEYS.values():
                os.environ.pop(key, None)
            os.environ.update(variants[name])
            yield

    paired_steps(args.model, 1, args.rounds, list(variants), variant)


if __name__ == "__main__":
    main()
