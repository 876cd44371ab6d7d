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
from mlx_lm.sample_utils import make_sampler

from batchlab.engine.config import ScheduleConfig
from batchlab.matrix.cell import Cell
from batchlab.matrix.drive import drive_script
from batchlab.trajectory import Trajectory, TrajectoryBuilder

ORACLE_NAME = "mlx_lm.generate.BatchGenerator"


def run_batch_oracle(
    cell: Cell,
    model: nn.Module,
    dtype: str,
    config: ScheduleConfig | None = None,
    keep_values: bool = False,
) -> Trajectory:
    """``config`` defaults to the cell's schedule. The cell's sampler is mlx-lm's own
    ``make_sampler``, shared by the batch; MLX's global key is seeded just before the run."""
    config = config or cell.schedule
    p = cell.sampling
    generator = BatchGenerator(
        model,
        max_tokens=max(r.max_tokens for r in cell.rows),
        sampler=None if p.greedy else make_sampler(p.temperature, top_p=p.top_p,
                                                   min_p=p.min_p, top_k=p.top_k),
        prefill_batch_size=config.prefill_batch_size,
        completion_batch_size=config.completion_batch_size,
        prefill_step_size=config.prefill_step_size,
    )
    mx.random.seed(p.seed)
    try:
        return _drive(cell, generator, TrajectoryBuilder(dtype, keep_values))
    finally:
        generator.close()


def _drive(cell: Cell, generator: BatchGenerator, out: TrajectoryBuilder) -> Trajectory:
    uid_of: dict[str, int] = {}
    name_of: dict[int, str] = {}
    alive: set[str] = set()

    def insert(rows):
        uids = generator.insert([list(r.prompt) for r in rows],
                                max_tokens=[r.max_tokens for r in rows])
        for row, uid in zip(rows, uids):
            uid_of[row.name], name_of[uid] = uid, row.name
            alive.add(row.name)
            out.start(row.name)

    def remove(rows):
        live = [r.name for r in rows if r.name in alive]
        generator.remove([uid_of[n] for n in live])
        alive.difference_update(live)

    def step(n):
        _, responses = generator.next()
        for response in responses:
            name = name_of[response.uid]
            out.add(name, n, response.token, response.logprobs)
            if response.finish_reason is not None:
                alive.discard(name)

    drive_script(cell, insert=insert, remove=remove, step=step, active=lambda: bool(alive))
    return out.build()
