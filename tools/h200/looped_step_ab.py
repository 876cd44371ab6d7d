"""Issue 28: the ``fast`` decode step with the looped kernel's variants toggled in one
process, interleaved (``looped.SPLIT``, ``looped.RING`` and ``grouped_decode.TILED`` are
read at every call), so
that the variants share the process, the allocator and the device's state: a paired
A/B finer than separate ``batchlab bench`` processes (whose medians moved 13.3-13.7
ms/step for the same code in the thirteenth round).

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/looped_step_ab.py \
        [--model llama-3.1-8b] [--batch 256] [--rounds 4] [--variants default,split,...]

Prints each variant's ms/step per round (128 prompt + 128 generated tokens per row,
greedy, a warm-up run of each first), then the median, and each variant's median ratio
to ``default`` over the rounds.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager

from batchlab.engine.kernels import grouped_decode as gd
from batchlab.engine.kernels import grouped_decode_looped as looped
from paired import paired_steps  # tools/h200, first on sys.path when run as a script

# name: (looped.SPLIT, looped.RING, gd.TILED: grouped_decode_tiled.py in the looped's place)
VARIANTS = {"default": (looped.SPLIT, looped.RING, gd.TILED), "mlx-sums": (False, 0, False),
            "split": (True, 0, False), "ring4": (False, 4, False),
            "split+ring4": (True, 4, False), "tiled": (looped.SPLIT, looped.RING, True)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variants", default="default,split,split+ring4")
    args = ap.parse_args()
    names = args.variants.split(",")

    @contextmanager
    def variant(name: str):
        looped.SPLIT, looped.RING, gd.TILED = VARIANTS[name]
        yield

    paired_steps(args.model, args.batch, args.rounds, names, variant)


if __name__ == "__main__":
    main()
