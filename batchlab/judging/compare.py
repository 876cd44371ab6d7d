"""Compare an engine trajectory with a golden: the L1 gate, bit for bit, no tolerance.

Equal means, for every row and every emitted token: the same emitting step, the same
token and the same sha256 of the logprobs bytes. The first divergence is the earliest
step at which any row differs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from batchlab.trajectory import Step, Trajectory


@dataclass(frozen=True, slots=True, kw_only=True)
class Divergence:
    row: str
    index: int  # which emitted token of the row (0 = first)
    step: int  # the scheduler step at which it was emitted (expected)
    what: str  # "bits" (same token, other logprobs), "token", "step" or "length"
    expected_token: int | None
    got_token: int | None
    max_abs_delta: float | None  # over the golden's top-k ids; None if unknown

    def describe(self) -> str:
        delta = "" if self.max_abs_delta is None else f", max |d logprob| {self.max_abs_delta:.3g}"
        return (f"row {self.row} token #{self.index} (step {self.step}): {self.what}; "
                f"expected {self.expected_token}, got {self.got_token}{delta}")

    def as_dict(self) -> dict:
        return asdict(self)


def first_divergence(expected: Trajectory, got: Trajectory, order: list[str]) -> Divergence | None:
    found = [d for name in order if (d := _row_divergence(name, expected, got)) is not None]
    return min(found, key=lambda d: (d.step, order.index(d.row))) if found else None


def _row_divergence(name: str, expected: Trajectory, got: Trajectory) -> Divergence | None:
    want, have = expected.rows.get(name, ()), got.rows.get(name, ())
    for i, (w, h) in enumerate(zip(want, have)):
        what = None
        if w.step != h.step:
            what = "step"
        elif w.token != h.token:
            what = "token"
        elif w.digest != h.digest:
            what = "bits"
        if what:
            return Divergence(row=name, index=i, step=w.step, what=what,
                              expected_token=w.token, got_token=h.token,
                              max_abs_delta=_delta(w, h))
    if len(want) != len(have):
        i = min(len(want), len(have))
        longer = want if len(want) > len(have) else have
        return Divergence(row=name, index=i, step=longer[i].step, what="length",
                          expected_token=want[i].token if i < len(want) else None,
                          got_token=have[i].token if i < len(have) else None,
                          max_abs_delta=None)
    return None


def _delta(want: Step, have: Step) -> float | None:
    if have.values is not None:
        return max(abs(v - float(have.values[i])) for i, v in want.top)
    have_top = dict(have.top)
    deltas = [abs(v - have_top[i]) for i, v in want.top if i in have_top]
    return max(deltas) if deltas else None
