"""Is the oracle consistent with itself? Its B=N rows against its own serial runs.

On the CPU backend matmul rows do not depend on M and SDPA ignores prepended masked
keys, so for full-attention, SSM, hybrid and MoE models every row of a B=N batch must
equal its own B=1 run (``generate_step``) bit for bit (FACTS.md). Where they differ, or
where batch mode crashes and the serial path does not, the oracle is wrong: ORACLE-BUG.
Sliding-window models are checked only while no ring can have wrapped (every key the
batch wrote still in the ring, where a ring is a plain cache); once one wraps the shared
ring pointer makes padded rows differ by design. Every GPU backend is exempt (batching
changes reduction order there).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx import nn
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import RotatingKVCache, make_prompt_cache
from mlx_lm.sample_utils import greedy_sampler

from batchlab.cells.cell import Cell
from batchlab.engine.core.config import MLX_LM_DEFAULTS
from batchlab.oracle.serial_history import (
    needs_history_replay,
    replay_row,
    row_is_greedy,
    segment_lengths,
)
from batchlab.trajectory import Trajectory, make_step


@dataclass(frozen=True, slots=True, kw_only=True)
class OracleBug:
    """Evidence that the oracle disagrees with itself."""

    kind: str  # "serial-mismatch" or "batch-crash"
    rows: tuple[str, ...]
    first_step: int | None  # index of the first differing token of the first bad row
    detail: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "rows": list(self.rows), "first_step": self.first_step,
                "detail": self.detail}


def serial_check_reason(model: nn.Module, backend: str, greedy: bool = True,
                        widest: int | None = None) -> str | None:
    """None if the serial check applies here, else why it does not. ``widest`` bounds
    the columns any batch ring of the run holds (``ring_width_bound``); a model with
    sliding windows is checked while that fits its smallest window (no ring wrapped)."""
    if not greedy:
        return ("skipped: temperature > 0 in every row (the batch's draws depend on B and "
                "the row order)")
    if not backend.startswith("cpu"):
        return f"skipped: on {backend} batching changes reduction order, B=N != B=1 is expected"
    caches = make_prompt_cache(model)
    windows = [c.max_size for c in _flat(caches) if isinstance(c, RotatingKVCache)]
    if windows and (widest is None or widest > min(windows)):
        return "skipped: sliding-window layers (the shared ring makes B=N differ from B=1)"
    return None


def ring_width_bound(cell: Cell, batch: Trajectory) -> int:
    """An upper bound on the columns a batch ring holds during the oracle's run: the most
    ids one row ever brings at once (prefix, prompt, resume ids, plus what it emitted
    before a park or finish) plus one column per step at which any row emitted (a decode
    forward writes one column; a prefill or a join widens a ring to its longest row).
    A static batch of 5-id prompts and 3 tokens: 5 + 3 = 8 (it holds 4 + 3 = 7)."""
    steps = [s.step for row in batch.rows.values() for s in row]
    if not steps:
        return 0
    ids = max(len(r.prefix) + len(r.prompt) + len(r.resume) + r.max_tokens
              if r.resume else len(r.prefix) + len(r.prompt) for r in cell.rows)
    return ids + len(set(steps))


def _flat(caches):
    for c in caches:
        yield from (_flat(c.caches) if hasattr(c, "caches") else (c,))


def serial_steps(model: nn.Module, prompt: tuple[int, ...], n: int,
                 prefill_step_size: int = MLX_LM_DEFAULTS.prefill_step_size):
    """The first ``n`` (token, step-record) pairs of mlx-lm's single-stream greedy path.
    Its prefill chunks ``prompt[:-1]`` as BatchGenerator does, so a batch prefilled in
    chunks of ``prefill_step_size`` is compared with a row prefilled in the same chunks
    (a state-space scan run in other chunks rounds differently, which is no bug)."""
    steps = []
    tokens = generate_step(mx.array(prompt), model, max_tokens=n, sampler=greedy_sampler,
                           prefill_step_size=prefill_step_size)
    for i, (token, logprobs) in enumerate(tokens):
        steps.append(make_step(i, token, logprobs, keep_values=False))
    return steps


def check_against_serial(cell: Cell, model: nn.Module, batch: Trajectory) -> OracleBug | None:
    """Each greedy row against its serial run; rows with history or processors are
    replayed with the batch's chunks (``serial_history``); sampled rows are not checked."""
    bad_rows, first = [], None
    details = []
    for row in cell.rows:
        got = batch.rows.get(row.name, ())
        if not row_is_greedy(cell, row):
            continue
        if needs_history_replay(row):
            lengths = segment_lengths(cell, row, got)
            if len(lengths) > 1 and lengths[0] == 0:
                continue  # parked before its first token: its cache holds part of a prompt
            serial = replay_row(model, cell, row, lengths)
        else:
            serial = serial_steps(model, row.prompt, len(got), cell.schedule.prefill_step_size)
        for i, (b, s) in enumerate(zip(got, serial)):
            if b.digest != s.digest or b.token != s.token:
                bad_rows.append(row.name)
                first = i if first is None else first
                details.append(
                    f"row {row.name} token {i}: batch {b.token} vs serial {s.token}, "
                    f"max |d logprob| over top-k {_top_delta(b, s):.3g}"
                )
                break
    if not bad_rows:
        return None
    return OracleBug(kind="serial-mismatch", rows=tuple(bad_rows), first_step=first,
                     detail="; ".join(details))


def _top_delta(a, b) -> float:
    bv = dict(b.top)
    deltas = [abs(v - bv[i]) for i, v in a.top if i in bv]
    return max(deltas) if deltas else float("inf")


def batch_crash_bug(cell: Cell, model: nn.Module, error: BaseException) -> OracleBug | None:
    """Batch mode raised. If every row runs serially, that is an oracle bug."""
    for row in cell.rows:
        serial_steps(model, row.prompt, 2)  # raises if the serial path is broken too
    return OracleBug(kind="batch-crash", rows=tuple(r.name for r in cell.rows),
                     first_step=None,
                     detail=f"BatchGenerator raised {type(error).__name__}: {error}; "
                            "the serial path runs every row")
