"""Seeded bug of the outside tester's sixth round (reports/gate/outside-tester-r6/): the
one bug of its 28 provable ones that every default cell passed.

The invariant path's blocked mode (the GPU's; ``invariant-blocked`` gates it on the CPU)
prefills each prompt alone on a model whose layers are not all ``RowKV``. On the CPU
every state but rwkv7's reads the padding mask, so prefilling such prompts together gave
the same bits on every invariant-blocked cell, and no rwkv7 cell ran blocked until the
tester's ``padded-sampled-row`` cell.

The function returns the patches of the bug; its docstring is the bug's description in
the catalog (``catalog_rounds.py`` names the cell that catches it). It wraps the engine's
own ``__init__``, so it keeps tracking it as it changes.
"""

from __future__ import annotations

from batchlab.engine.core.config import MLX_LM_DEFAULTS
from batchlab.engine.paths.invariant import path as invariant
from batchlab.selftest.inject import Patch, wrapped


def blocked_prefills_state_together() -> list[Patch]:
    """In blocked mode the invariant path drops the two lines that prefill each prompt
    alone where a layer is not a RowKV (rings, SSM or conv state): the prompts admitted
    together are prefilled in one right-padded batch, whose padding rwkv7's state runs
    through, so a short row is no longer itself run alone. (The unblocked branch's own
    lines for rwkv7 stay.)"""

    def make(clean):
        def init(self, model, config=MLX_LM_DEFAULTS, *args, **kwargs):
            clean(self, model, config, *args, **kwargs)
            if self.rows_per_gemm:  # the blocked branch only
                self.config = config
                self.prompts_per_step = 1
                self.max_decoding = max(config.completion_batch_size,
                                        config.prefill_batch_size)

        return init

    return [wrapped(invariant.InvariantScheduler, "__init__", make)]
