"""A few one-row steps of llama-3.2-1b through the one-kernel step (``RowStep``), eval'd
one at a time, for Nsight Compute to profile one launch of the kernel (s49-next.sh 9).

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/row_step_ncu.py
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.bench.shapes import load_model
from batchlab.engine.paths.fast.persistent_decode import RowStep
from tools.h200.row_step_diag import caches_for

model = load_model("llama-3.2-1b").model
step = RowStep(model)
caches = caches_for(step)
tokens = mx.array([5], dtype=mx.int32)
for _ in range(6):
    mx.eval(step.logits(tokens, caches))
print("row_step_ncu: 6 steps", flush=True)
