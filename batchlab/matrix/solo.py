"""The solo gate: every row of a cell against the same row run alone on the same path.

A path judged by ``Reference.SOLO`` (``batchlab/judging/judging.py``) promises batch
invariance, not mlx-lm's bits, so its reference is not a golden: for each row of the
cell, the engine runs a one-row cell (that row inserted at step 0, nothing else) on the
same path, and the row's tokens and logprob bytes must equal that run's, token by token.

    cell    invariant/gemma3/B16/needle/join-evict/ctx-short
    solo    invariant/gemma3/B1/solo-A/... : row A alone, then row B alone, ...

Steps are not compared (a row that joins at step 3 emits its first token later than
alone); everything else is, bit for bit. A row the script removes early is compared on
the tokens it emitted; any other row must emit exactly as many tokens as alone.
"""

from __future__ import annotations

from dataclasses import replace

from batchlab.cells.cell import Cell, Event, Row
from batchlab.engine.core.sampler import RowSampler
from batchlab.engine.paths.registry import resolve_path
from batchlab.trajectory import Trajectory


def solo_cell(cell: Cell, row: Row) -> Cell:
    """``row`` alone on the cell's path, model, schedule and sampler."""
    return replace(cell, batch=1, padding="solo", script=f"solo-{row.name}", rows=(row,),
                   events=(Event(step=0, action="insert", rows=(row.name,)),))


def refusal(cell: Cell) -> str | None:
    """Why the solo gate cannot judge ``cell`` (None: it can)."""
    if not cell.sampling.greedy:
        return ("a shared sampler at temperature > 0 draws one batched categorical from "
                "MLX's global key, which depends on B; give rows their own seeded samplers")
    own_keys = resolve_path(cell.path).scheduler.row_sampler_default is RowSampler
    if not own_keys and any(r.sampling is not None and not r.sampling.greedy
                            for r in cell.rows):
        return ("per-row samplers on this path draw from MLX's global key in batch order "
                "(BatchSampler), which depends on B and position")
    if any(e.action in ("park", "resume") for e in cell.events) or any(r.prefix for r in cell.rows):
        return "the solo gate compares fresh rows; park/resume and prefixes are not solo runs"
    return None


_SOLO_RUNS: dict[tuple[str, str, str], Trajectory] = {}


def _solo_run(cell: Cell, engine: str) -> Trajectory:
    from batchlab.matrix import engine_run

    key = (cell.id, cell.definition_digest(), engine)
    if key not in _SOLO_RUNS:
        _SOLO_RUNS[key] = (engine_run.run_cell(cell) if engine == "batchlab"
                           else engine_run.run_cell(cell, engine=engine))
    return _SOLO_RUNS[key]


def forget_solo_runs() -> None:
    """Drop the memoized solo runs (a test that patches the engine must)."""
    _SOLO_RUNS.clear()


def solo_reference(cell: Cell, got: Trajectory, engine: str = "batchlab") -> Trajectory:
    """What ``got`` must equal: each row's solo run, cut to the tokens the row emitted
    when the script removes it, and stamped with ``got``'s steps (steps are not gated),
    run on the same subject (``engine``). Solo runs are memoized per process: the
    needle's runs once for every trial."""
    removed = {name for e in cell.events if e.action == "remove" for name in e.rows}
    rows = {}
    for row in cell.rows:
        alone = _solo_run(solo_cell(cell, row), engine).rows[row.name]
        have = got.rows.get(row.name, ())
        if row.name in removed:
            alone = alone[: len(have)]
        rows[row.name] = tuple(replace(s, step=have[i].step) if i < len(have) else s
                               for i, s in enumerate(alone))
    return Trajectory(rows=rows, dtype=got.dtype)
