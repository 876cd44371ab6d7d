"""The L1 oracle: mlx-lm's own BatchGenerator driven through a cell's script.

This is the only place (with ``oracle/serial.py``) that runs mlx-lm's batch mode. The
script's events are applied just before decode step ``s`` (one ``BatchGenerator.next()``
call per step); every generation response is recorded under its row's name with the
step that emitted it. No stop tokens: rows end only at their ``max_tokens`` or when the
script removes them, so random-weight models that emit EOS early still run the script.
"""

from __future__ import annotations

import mlx.core as mx
from mlx import nn
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import make_sampler

from batchlab.cells.cell import Cell
from batchlab.cells.drive import drive_script
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.sampler import SamplingParams
from batchlab.oracle.processors import mlx_lm_processors
from batchlab.trajectory import Trajectory, TrajectoryBuilder

ORACLE_NAME = "mlx_lm.generate.BatchGenerator"


def run_batch_oracle(
    cell: Cell,
    model: nn.Module,
    dtype: str,
    config: ScheduleConfig | None = None,
    keep_values: bool = False,
    held: dict[str, int] | None = None,
) -> Trajectory:
    """``config`` defaults to the cell's schedule. The cell's sampler is mlx-lm's own
    ``make_sampler``, shared by the batch; MLX's global key is seeded just before the run.
    ``held``, if given, gets the number of ids each parked row's caches held when it was
    parked (0: parked while still queued, its caches hold nothing)."""
    config = config or cell.schedule
    p = cell.sampling
    generator = BatchGenerator(
        model,
        max_tokens=max(r.max_tokens for r in cell.rows),
        sampler=None if p.greedy else mlx_lm_sampler(p),
        prefill_batch_size=config.prefill_batch_size,
        completion_batch_size=config.completion_batch_size,
        prefill_step_size=config.prefill_step_size,
    )
    mx.random.seed(p.seed)
    try:
        return _drive(cell, generator, TrajectoryBuilder(dtype, keep_values),
                      {} if held is None else held)
    finally:
        generator.close()


def _drive(cell: Cell, generator: BatchGenerator, out: TrajectoryBuilder,
           held: dict[str, int]) -> Trajectory:
    uid_of: dict[str, int] = {}
    name_of: dict[int, str] = {}
    alive: set[str] = set()
    parked: dict[str, tuple[list, list[int]]] = {}  # name -> (caches, the ids they hold)
    finished: dict[str, tuple[list, list[int]]] = {}  # the caches a row finished with
    model, step_size = generator.model, generator.prefill_step_size

    def add(rows, prompts, caches, all_tokens):
        per_row = row_options(rows)
        uids = generator.insert(prompts, max_tokens=[r.max_tokens for r in rows],
                                caches=caches, all_tokens=all_tokens, **per_row)
        for row, uid in zip(rows, uids):
            uid_of[row.name], name_of[uid] = uid, row.name
            alive.add(row.name)
            out.start(row.name)

    def insert(rows):
        if any(r.prefix for r in rows):
            caches = [prefix_cache(model, r.prefix, step_size) if r.prefix else None for r in rows]
            add(rows, [list(r.prompt) for r in rows], caches, [list(r.prefix) for r in rows])
        else:
            add(rows, [list(r.prompt) for r in rows], None, None)

    def remove(rows):
        live = [r.name for r in rows if r.name in alive]
        generator.remove([uid_of[n] for n in live])
        alive.difference_update(live)

    def park(rows):
        names = [r.name for r in rows]
        kept = generator.remove([uid_of[n] for n in names], return_prompt_caches=True)
        for name in names:
            caches, tokens = kept[uid_of[name]]  # the script parks rows before they can end
            parked[name] = (caches, list(tokens))
            held[name] = len(tokens)
        alive.difference_update(names)

    def resume(rows):
        held = [parked.pop(r.name) for r in rows]
        add(rows, [list(r.resume) for r in rows], [c for c, _ in held], [t for _, t in held])

    def continue_(rows):
        missing = [r.name for r in rows if r.name not in finished]
        if missing:
            raise RuntimeError(f"{cell.id}: rows {missing} are continued before they finished")
        held = [finished.pop(r.name) for r in rows]
        add(rows, [list(r.resume) for r in rows], [c for c, _ in held], [t for _, t in held])

    def step(n):
        _, responses = generator.next()
        for response in responses:
            name = name_of[response.uid]
            out.add(name, n, response.token, response.logprobs)
            if response.finish_reason is not None:
                alive.discard(name)
                finished[name] = (response.prompt_cache, list(response.all_tokens))

    drive_script(cell, insert=insert, remove=remove, step=step, active=lambda: bool(alive),
                 park=park, resume=resume, continue_=continue_)
    return out.build()


def row_options(rows) -> dict:
    """``insert``'s per-row samplers and processors, mlx-lm's own (a row without its own
    sampler takes the generator's shared one). Each row gets its own sampler object, so a
    batch with any of them samples one row at a time, in batch order."""
    out = {}
    if any(r.sampling for r in rows):
        out["samplers"] = [mlx_lm_sampler(r.sampling) if r.sampling else None for r in rows]
    if any(r.processors for r in rows):
        out["logits_processors"] = [
            mlx_lm_processors(r.processors) if r.processors else None
            for r in rows]
    return out


def mlx_lm_sampler(p: SamplingParams):
    return make_sampler(p.temperature, top_p=p.top_p, min_p=p.min_p, top_k=p.top_k,
                        xtc_probability=p.xtc_probability, xtc_threshold=p.xtc_threshold)


def prefix_cache(model: nn.Module, prefix: tuple[int, ...], step_size: int) -> list:
    """A row's caches after mlx-lm's single-stream prefill of ``prefix`` (as generate_step
    prefills: ``make_prompt_cache``, then the forward in chunks of ``step_size``)."""
    cache = make_prompt_cache(model)
    tokens = mx.array(list(prefix))[None]
    while tokens.shape[1] > 0:
        model(tokens[:, :step_size], cache=cache)
        mx.eval([c.state for c in cache])
        tokens = tokens[:, step_size:]
    return cache
