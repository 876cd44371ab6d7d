"""Evidence for the bugs of tools/tester3/bugs.py's EQUIVALENT: count, over default cells,
the states those bugs would change (each count 0 means the bug cannot change a bit there).

    python -m tools.tester3.instrument_equivalent [FILTER]

- append_nonzero_roll: BatchRing._append with right padding to roll left (the roll that
  ring-chunk-no-padding-roll drops), out of append_rolls calls that check;
- mask_after_advance: BatchState.make_mask reading a lengths already advanced (what
  state-advance-skips-lengths would leave stale);
- state_lp_positive: BatchState.make_mask with a positive left_padding (the only value
  that masks a step, and what state-filter-keeps-padding-rows would mix up).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.engine.caches import ring, state
from batchlab.matrix.evaluate import Reference, evaluate_cell

DEFAULT_FILTER = "*ps8*,*park-stages*,*evict-early*,*ctx-wrap*,*mamba2*,*lfm2*,*falcon-h1*"


def main() -> None:
    pattern = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_FILTER
    stats = {"append_rolls": 0, "append_nonzero_roll": 0, "mask_after_advance": 0,
             "state_lp_positive": 0}
    clean_append, clean_mask = ring.BatchRing._append, state.BatchState.make_mask

    def _append(self, keys, values):
        if self.keys is not None and self._lengths is not None:
            stats["append_rolls"] += 1
            stats["append_nonzero_roll"] += bool(
                np.any(np.maximum(0, self.offset_host - self._lengths)))
        return clean_append(self, keys, values)

    def make_mask(self, N):
        stats["mask_after_advance"] += bool(self.lengths_ints.is_set
                                            and self.lengths_ints._pending)
        lp = self.left_padding_host
        stats["state_lp_positive"] += bool(lp is not None and np.any(lp > 0))
        return clean_mask(self, N)

    ring.BatchRing._append, state.BatchState.make_mask = _append, make_mask
    try:
        cells = select(load_matrix("matrices/default.toml"), pattern, None)
        ref = Reference(matrix="matrices/default.toml", goldens=Path("goldens"), live=False)
        bad = sum(evaluate_cell(c, ref).status not in ("PASS", "ORACLE-BUG", "UNSUPPORTED")
                  for c in cells)
    finally:
        ring.BatchRing._append, state.BatchState.make_mask = clean_append, clean_mask
    print(f"{len(cells)} cells ({pattern}), not passing: {bad}; {stats}")


if __name__ == "__main__":
    main()
