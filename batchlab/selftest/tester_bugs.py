"""Seeded bugs of the outside tester's second round (reports/gate/outside-tester-r2/): the
regimes its bugs found unreached by the default matrix, now each with cells of its own.
(Its other miss, WindowKV's cut keeping the padding, was seeded already, caught only by
matrices/invariant.toml: ``invariant_bugs.window_cut_keeps_padding``; the catalog now
names default cells for it too.)

Each function returns the patches of one bug; its docstring is the bug's description in
the catalog (``catalog_rounds.py`` names the cells that catch it).
"""

from __future__ import annotations

from batchlab.engine.core import sampler as core_sampler
from batchlab.selftest.inject import Patch


def xtc_before_min_p() -> list[Patch]:
    """The sampler's filter chain reordered: XTC before min-p (mlx-lm's make_sampler runs
    top-p, min-p, XTC, top-k). When XTC's coin fires it removes the top tokens, so min-p's
    floor (the top logprob + log min_p) drops and keeps tokens mlx-lm removes."""
    s = core_sampler

    def buggy(logprobs, p):
        x = logprobs
        if 0 < p.top_p < 1:
            x = s._top_p(x, p.top_p)
        if p.xtc_probability > 0.0:
            x = s._xtc(x, p.xtc_probability, p.xtc_threshold)
        if p.min_p != 0.0:
            x = s._min_p(x, p.min_p)
        if 0 < p.top_k < x.shape[-1]:
            x = s._top_k(x, p.top_k)
        return x * (1.0 / p.temperature)

    return [Patch(owner=core_sampler, name="filtered_logits", value=buggy)]
