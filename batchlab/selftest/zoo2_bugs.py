"""Seeded bugs found by the zoo's new cache layouts (zoo2): multi-head latent attention
(deepseek-v3, kimi-linear) and a recurrent state that reads no mask (rwkv7).

Found when those models joined the zoo: the row-blocked invariant path's row kernels
apply no mask, and MLA adds the scores of its decoupled key part (``q_pe @ k_pe^T``)
through the mask, so they were dropped: kimi-linear's token 0 off by 0.56 in logprob with
every row still equal to itself alone (only the second judge saw it); deepseek-v3
crashed on the padded decode block. The fix adds the scores per row
(``attention_dispatch.additive_scores``) and pads no decode block for MLA; the bug
drops the scores again, or pads the decode block again.
"""

from __future__ import annotations

from batchlab.engine.kernels import attention_dispatch
from batchlab.engine.paths.invariant import path as invariant
from batchlab.selftest.inject import Patch, wrapped


def rows_drop_latent_scores() -> list[Patch]:
    """The invariant path's row attention drops the additive mask that carries MLA's
    decoupled key scores (the engine before the fix, less the crash): every row equals
    itself alone, but not the batch oracle."""
    return [Patch(owner=attention_dispatch, name="additive_scores", value=lambda mask: None)]


def pads_latent_decode() -> list[Patch]:
    """The invariant path pads an MLA model's decode batch to a whole GEMM block as it
    does every full-attention model's (the engine before the fix): MLA scores the cache's
    keys, which hold the batch's rows only, against every query row, padding rows
    included, outside attention: a broadcast error at the first decode step."""

    def make(clean):
        def init(self, model, *args, **kwargs):
            clean(self, model, *args, **kwargs)
            self.pads_decode = bool(self.rows_per_gemm) and invariant.prefills_together(
                self.model, self.caches)

        return init

    return [wrapped(invariant.InvariantScheduler, "__init__", make)]


def prefills_maskless_state_together() -> list[Patch]:
    """The invariant path prefills rwkv7's prompts together on the CPU, as it does every
    model whose layers mask the padding (the engine before zoo2): a short row's state
    then runs through the padding, so it is not the row alone."""
    return [Patch(owner=invariant, name="MASKLESS_STATE", value=frozenset())]
