"""Teacher-forced runs of several engine paths in lockstep, scored against a reference.

Each row is a slice of real text: its first ``context`` ids are the prompt, the rest
are forced, one per decode step (the row's sampler returns the next id of the text
instead of drawing), so every path sees the same text and only the distributions
differ. Rows are more than the batch holds (``completion_batch_size = batch``): the
rest wait in the queue and join as rows finish, so the batch is ragged and has joins.

The paths' schedulers step together; a position is scored as soon as the reference and
a path have both emitted it, then dropped, so memory does not grow with the corpus
(``Scores`` keeps a few floats per position).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
from mlx import nn

from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.sampler import SamplingParams
from batchlab.engine.paths.registry import resolve_path

FORCED = SamplingParams(temperature=1.0)  # any non-greedy params: sample_rows calls the row


class ForcedSampler:
    """A row's "sampler" that returns the next id of its text."""

    params = FORCED

    def __init__(self, forced: list[int]):
        self.forced = list(forced)
        self.i = 0

    def __call__(self, logprobs: mx.array) -> mx.array:
        token = self.forced[min(self.i, len(self.forced) - 1)]
        self.i += 1
        return mx.array([token], dtype=mx.int32)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextRow:
    name: str
    ids: tuple[int, ...]  # context + forced continuation
    context: int


@dataclass(slots=True, kw_only=True)
class Scores:
    """Per scored position: KL(ref || path), whether the argmaxes agree, the forced
    token's probability under both, and its log-probability under both."""

    kl: list[float] = field(default_factory=list)
    same_top1: list[bool] = field(default_factory=list)
    p_ref: list[float] = field(default_factory=list)
    p_path: list[float] = field(default_factory=list)
    logp_ref: list[float] = field(default_factory=list)
    logp_path: list[float] = field(default_factory=list)

    def add(self, ref: np.ndarray, got: np.ndarray, token: int) -> None:
        lr, lg = _normalized(ref), _normalized(got)
        pr = np.exp(lr)
        self.kl.append(float(np.sum(pr * (lr - lg))))
        self.same_top1.append(int(np.argmax(ref)) == int(np.argmax(got)))
        self.p_ref.append(float(np.exp(lr[token])))
        self.p_path.append(float(np.exp(lg[token])))
        self.logp_ref.append(float(lr[token]))
        self.logp_path.append(float(lg[token]))


def _normalized(logprobs: np.ndarray) -> np.ndarray:
    x = logprobs.astype(np.float64)
    top = x.max()
    return x - (top + np.log(np.sum(np.exp(x - top))))


def text_rows(tokens: tuple[int, ...], *, rows: int, length: int, context: int,
              start: int = 0) -> list[TextRow]:
    """``rows`` consecutive slices of ``length`` ids from ``start``; lengths vary by
    row (ragged: every other row 1/8 shorter) so rows finish and join at other steps."""
    out, at = [], start
    for i in range(rows):
        n = length - (length // 8 if i % 2 else 0)
        if at + n > len(tokens):
            break
        out.append(TextRow(name=f"r{i}", ids=tuple(tokens[at : at + n]), context=context))
        at += n
    if not out:
        raise ValueError(f"the text ({len(tokens)} ids) is shorter than one row of {length}")
    return out


def _host_logprobs(emitted) -> list[np.ndarray]:
    """Each emission's (V,) float32 log-probabilities, one host copy per step's (B, V)
    array: a copy per row was a device round trip per row, a large share of the H200's
    whole-corpus run (its profile: reports/bench/cuda-sm90/issue28-looped/)."""
    copies: dict[int, np.ndarray] = {}
    out = []
    for e in emitted:
        key = id(e.step_logprobs)  # the emissions hold the arrays: ids stay unique
        if key not in copies:
            copies[key] = np.array(e.step_logprobs.astype(mx.float32))
        out.append(copies[key][e.row])
    return out


def _scheduler(model: nn.Module, path: str, batch: int, step: int, rows: list[TextRow]):
    config = ScheduleConfig(prefill_batch_size=batch, completion_batch_size=batch,
                            prefill_step_size=step)
    scheduler = resolve_path(path, model).scheduler(model, config)
    scheduler.insert([Request(name=r.name, prompt=r.ids[: r.context],
                              max_tokens=len(r.ids) - r.context) for r in rows])
    for seq in scheduler.queue:  # forced continuation: the ids after the context
        row = next(r for r in rows if r.name == seq.name)
        seq.sampler = ForcedSampler(row.ids[row.context :])
    return scheduler


def teacher_forced(model: nn.Module, rows: list[TextRow], paths: list[str], reference: str,
                   *, batch: int, prefill_step_size: int = 2048,
                   progress=None) -> dict[str, Scores]:
    """Scores of every path in ``paths`` against ``reference`` over every forced id.
    The emission of index i of a row is the distribution that predicts ``ids[context+i]``
    (index 0 comes from the prompt's last id)."""
    names = [reference, *[p for p in paths if p != reference]]
    schedulers = {p: _scheduler(model, p, batch, prefill_step_size, rows) for p in names}
    target = {r.name: r.ids[r.context :] for r in rows}
    pending: dict[str, dict[tuple[str, int], np.ndarray]] = {p: {} for p in names}
    counts = {p: {r.name: 0 for r in rows} for p in names}
    scores = {p: Scores() for p in names if p != reference}
    left: dict[tuple[str, int], int] = {}  # paths yet to score a reference position
    while any(s.num_active for s in schedulers.values()):
        for p, s in schedulers.items():
            emitted = s.step()
            for e, logprobs in zip(emitted, _host_logprobs(emitted), strict=True):
                k = counts[p][e.name]
                counts[p][e.name] += 1
                pending[p][(e.name, k)] = logprobs
                if p == reference:
                    left[(e.name, k)] = len(scores)
        ref = pending[reference]
        for key in list(ref):
            for p, got in scores.items():
                if key in pending[p]:
                    got.add(ref[key], pending[p].pop(key), target[key[0]][key[1]])
                    left[key] -= 1
            if left[key] <= 0:
                del ref[key], left[key]
        if progress:
            progress(sum(counts[reference].values()))
    return scores
