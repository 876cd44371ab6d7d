import numpy as np
from pathlib import Path
from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.engine.caches import ring, state
stats = {"append_rolls": 0, "append_nonzero_roll": 0, "mask_after_advance": 0, "state_lp_nonzero": 0}
orig_roll = ring.BatchRing._roll_padding_left
orig_append = ring.BatchRing._append
def _append(self, k, v):
    if self.keys is not None and self._lengths is not None:
        stats["append_rolls"] += 1
        if np.any(np.maximum(0, self.offset_host - self._lengths)):
            stats["append_nonzero_roll"] += 1
    return orig_append(self, k, v)
ring.BatchRing._append = _append
orig_mask = state.BatchState.make_mask
def make_mask(self, N):
    if self.lengths_ints.is_set and self.lengths_ints._pending:
        stats["mask_after_advance"] += 1
    if self.left_padding_host is not None and np.any(self.left_padding_host > 0):
        stats["state_lp_nonzero"] += 1
    return orig_mask(self, N)
state.BatchState.make_mask = make_mask
cells = select(load_matrix("matrices/default.toml"), "*mamba2*,*qwen3.5*,*lfm2*,*falcon-h1*,*nemotron*", None)
ref = Reference(matrix="matrices/default.toml", goldens=Path("goldens"), live=False)
bad = 0
for c in cells:
    r = evaluate_cell(c, ref)
    bad += r.status not in ("PASS", "ORACLE-BUG", "UNSUPPORTED")
print(len(cells), "cells, not passing:", bad, stats)
