"""The invariant paths' second judge: a row that passed the solo gate against the batch
oracle's golden of the same scenario.

The solo gate proves a row equals itself run alone; it cannot see a bug that changes a
row the same way alone and in a batch (a RoPE offset off by one in every row, a window
that keeps one key too many). The oracle can. Only greedy rows are compared (a row with
its own seeded sampler draws from its own key here, from MLX's global key there), and
steps aside (the invariant path may admit a prompt on another step than mlx-lm; its
tokens and logprobs are what it promises). A row the script removes is compared on the
tokens both emitted. Bit-exact where the backend makes them equal
(``Judging.second_is_exact``), else the second KL gate (``Judging.second_gate``) over
each row's positions up to its first differing token: a one-ulp difference at a bf16
near-tie may flip a greedy token, and every position after it is in another context.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from batchlab.cells.cell import Cell
from batchlab.judging.compare import Divergence, first_divergence
from batchlab.judging.judging import SECOND_KL_GATE, Judging
from batchlab.judging.kl import KLGate, KLStats, kl_stats
from batchlab.trajectory import Trajectory


@dataclass(frozen=True, slots=True, kw_only=True)
class SecondVerdict:
    passed: bool
    detail: str
    divergence: Divergence | None = None
    kl: KLStats | None = None
    stale: bool = False  # the golden cannot serve this judge: made before it needed logprobs


def greedy_rows(cell: Cell) -> list[str]:
    return [r.name for r in cell.rows if (r.sampling or cell.sampling).greedy]


def aligned(cell: Cell, want: Trajectory, got: Trajectory,
            up_to_flip: bool = False) -> tuple[Trajectory, Trajectory]:
    """Greedy rows only, ``want``'s steps replaced by ``got``'s, removed rows cut to the
    tokens both emitted; ``up_to_flip``: every row cut after its first differing token."""
    removed = {name for e in cell.events if e.action == "remove" for name in e.rows}
    want_rows, got_rows = {}, {}
    for name in greedy_rows(cell):
        w, h = want.rows.get(name, ()), got.rows.get(name, ())
        if name in removed:
            n = min(len(w), len(h))
            w, h = w[:n], h[:n]
        if up_to_flip:
            flip = next((i for i, (a, b) in enumerate(zip(w, h)) if a.token != b.token), None)
            if flip is not None:
                w, h = w[: flip + 1], h[: flip + 1]
        want_rows[name] = tuple(replace(s, step=h[i].step) if i < len(h) else s
                                for i, s in enumerate(w))
        got_rows[name] = h
    return (Trajectory(rows=want_rows, dtype=want.dtype),
            Trajectory(rows=got_rows, dtype=got.dtype))


def second_judge(cell: Cell, judging: Judging, exact: bool, golden: Trajectory,
                 got: Trajectory, gate: KLGate = SECOND_KL_GATE) -> SecondVerdict:
    rows = greedy_rows(cell)
    if not rows:
        return SecondVerdict(passed=True, detail="no greedy row for the batch oracle")
    want, have = aligned(cell, golden, got)
    divergence = first_divergence(want, have, rows)
    if divergence is None:
        return SecondVerdict(passed=True, detail=f"{len(rows)} greedy rows equal the batch "
                             "oracle's bits (steps aside)")
    where = f"against the batch oracle: {divergence.describe()}"
    if exact:
        return SecondVerdict(passed=False, divergence=divergence,
                             detail=f"{where} (expected bit-exact)")
    want, have = aligned(cell, golden, got, up_to_flip=True)
    if divergence.what == "length" or first_divergence(want, have, rows).what == "length":
        return SecondVerdict(passed=False, divergence=divergence, detail=where)
    if not want.has_values():
        return SecondVerdict(passed=False, divergence=divergence, stale=True,
                             detail=f"{where}; the golden keeps no logprobs for the KL gate: "
                                    "regenerate it (`batchlab golden regen`) or rerun --live")
    stats = kl_stats(want, have)
    flips = sum(1 for name in rows if want.rows[name] and want.rows[name][-1].token
                != have.rows[name][-1].token)
    cut = f" (compared up to the first differing token: {flips} rows flip)" if flips else ""
    return SecondVerdict(passed=gate.admits(stats), divergence=divergence, kl=stats,
                         detail=f"not bit-exact {where}; {stats.describe()}{cut}; "
                                f"{gate.describe()}")
