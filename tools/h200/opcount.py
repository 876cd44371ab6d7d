"""Issue 28 item 2: how many ops one decode step submits, per engine (graph walk).

Each engine runs the bench's driver (``batchlab/bench/engines.py``: same prompts, same
loop) on a bench shape; inside the decode window the first ``mx.async_eval`` /
``mx.eval`` call after ``SKIP`` submits is exported with ``mx.export_to_dot`` and its
primitives counted (every node with a label: one primitive each, what MLX encodes into
its graph; inputs and constants are not nodes). Ops are per backend: run it where the
figure matters (the CUDA graph has the fused kernels, the CPU's fallbacks are several ops).
Only the pipelined submits are counted: an engine that submits twice a step (a sampled
token and the next forward) shows both calls' ops in its one window.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/opcount.py llama-3.2-1b fast,l1,invariant
"""

from __future__ import annotations

import collections
import re
import sys
import tempfile
from contextlib import contextmanager
from functools import partial

import mlx.core as mx

from batchlab.bench.engines import engines_at
from batchlab.bench.measure import make_prompts
from batchlab.bench.shapes import load_model

SKIP = 3  # submits left alone first: the window's first steps may still build shapes
LABEL = re.compile(r'\[label ="([^"]+)"')


def count_graph(arrays) -> collections.Counter:
    """Primitive labels of the graph that evaluating ``arrays`` runs."""
    flat = [a for a in arrays if isinstance(a, mx.array)]
    with tempfile.NamedTemporaryFile("r", suffix=".dot") as f:
        mx.export_to_dot(f.name, *flat)
        return collections.Counter(LABEL.findall(f.read()))


@contextmanager
def counting(found: list):
    async_eval, eval_ = mx.async_eval, mx.eval
    seen = [0]

    def hook(submit, *arrays):
        seen[0] += 1
        if seen[0] == SKIP + 1 and not found:
            leaves = []
            for a in arrays:
                leaves.extend(a if isinstance(a, (list, tuple)) else [a])
            found.append(count_graph(leaves))
        return submit(*arrays)

    mx.async_eval, mx.eval = partial(hook, async_eval), partial(hook, eval_)
    try:
        yield
    finally:
        mx.async_eval, mx.eval = async_eval, eval_


def main() -> None:
    shape = sys.argv[1] if len(sys.argv) > 1 else "llama-3.2-1b"
    paths = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else ("fast", "l1")
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    loaded = load_model(shape)
    prompts = make_prompts(batch, 16, loaded.vocab_size, 0)
    print(f"{shape} B={batch} on {mx.default_device()}: ops in one decode submit", flush=True)
    for name, drive in engines_at(paths, batch):
        drive(loaded.model, prompts, 8)  # warm-up: the engine's own one-time work
        found: list = []
        drive(loaded.model, prompts, 12, window=partial(counting, found))
        if not found:
            print(f"{name:16s} no submit counted", flush=True)
            continue
        ops = found[0]
        top = ", ".join(f"{k} {v}" for k, v in ops.most_common(12))
        print(f"{name:16s} {sum(ops.values()):5d} ops  | {top}", flush=True)


if __name__ == "__main__":
    main()
