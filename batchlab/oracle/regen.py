"""Make goldens: run the oracle on each cell's scenario and write the result atomically.

Cells that share a scenario (the same scenario under several paths) make one golden.
A scenario whose oracle is self-inconsistent is still written, marked with the evidence,
so the gate reports ORACLE-BUG instead of NO-GOLDEN.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path

from batchlab.backend import backend_key
from batchlab.cells.cell import Cell
from batchlab.golden.check import expected_stamp, model_fingerprint
from batchlab.golden.store import Golden, golden_path, write_golden
from batchlab.judging.judging import judging_for, quantized_exact
from batchlab.oracle.batch import ORACLE_NAME, run_batch_oracle
from batchlab.oracle.serial import (
    batch_crash_bug,
    check_against_serial,
    ring_width_bound,
    serial_check_reason,
)
from batchlab.zoo import load


@dataclass(frozen=True, slots=True, kw_only=True)
class RegenOutcome:
    scenario_id: str
    path: Path
    serial_check: str
    error: str | None = None  # the oracle could not run at all: no golden written


def make_golden(cell: Cell, keep_values: bool = False) -> Golden:
    """Run the oracle (batch mode, then the serial self-check) for one scenario.
    ``keep_values`` keeps full logprob vectors in memory (for KL gates; never written)."""
    loaded = load(cell.model)
    scheme = _kv_scheme(cell)
    if scheme is not None:
        return _quantized_golden(cell, loaded, scheme, keep_values)
    any_greedy = any((r.sampling or cell.sampling).greedy for r in cell.rows)
    try:
        trajectory = run_batch_oracle(cell, loaded.model, loaded.dtype, keep_values=keep_values)
    except Exception as err:  # noqa: BLE001 - a crash in batch mode is evidence
        bug = batch_crash_bug(cell, loaded.model, err)
        trajectory, serial_check = None, "oracle-bug"
    else:
        skip = serial_check_reason(loaded.model, backend_key(), any_greedy,
                                   widest=ring_width_bound(cell, trajectory))
        bug = None if skip else check_against_serial(cell, loaded.model, trajectory)
        serial_check = skip or ("oracle-bug" if bug else "agrees")
    return Golden(
        stamp=expected_stamp(cell, model_fingerprint(cell.model)),
        oracle=ORACLE_NAME,
        dtype=loaded.dtype,
        serial_check=serial_check,
        oracle_bug=bug.as_dict() if bug else None,
        trajectory=trajectory,
    )


def _kv_scheme(cell: Cell):
    """The serial quantized oracle's scheme, or None: the batch oracle judges the cell."""
    return judging_for(cell.path).kv_scheme


SIDECAR_MAX_VOCAB = 4096  # a real vocabulary (49152) makes ~3.5 MB of logprobs per cell


def _kl_gated(cell: Cell) -> bool:
    """A quantized-KV cell that cannot be bit-exact keeps its logprobs (a sidecar) for
    its KL gate; which cells can is ``judging.quantized_exact``'s rule (not on a GPU, no
    sliding windows, and at a start > 0 only where every row switches on the same write).
    Every other quantized cell is gated bit-exact (no sidecar: a difference is a FAIL),
    except in ``--live`` runs, which keep the logprobs of every lab path. The invariant
    paths' second judge keeps them where it is not bit-exact (``Judging.second_is_exact``)."""
    judging = judging_for(cell.path)
    if judging.second is not None:
        from batchlab.cells.validate import vocab_size

        vocab = vocab_size(cell.model)
        return (vocab is not None and vocab <= SIDECAR_MAX_VOCAB
                and not judging.second_is_exact(load(cell.model).model))
    scheme = _kv_scheme(cell)
    if scheme is None:
        return False
    from batchlab.engine.core.layers import has_rings

    model = load(cell.model).model
    on_gpu = not backend_key().startswith("cpu-")
    return (model.args.vocab_size <= SIDECAR_MAX_VOCAB
            and not quantized_exact(cell, has_rings=has_rings(model), on_gpu=on_gpu))


def _quantized_golden(cell: Cell, loaded, scheme, keep_values: bool) -> Golden:
    """A quantized-KV cell: each row alone through mlx-lm's QuantizedKVCache
    (``oracle/quantized_serial.py``); that serial run is the reference itself."""
    from batchlab.oracle.quantized_serial import QUANTIZED_ORACLE_NAME, run_quantized_oracle

    if scheme.rotated:
        raise ValueError(f"path {cell.path} has no mlx-lm oracle (rotated keys); measure it "
                         "with `batchlab lab kl` instead of matrix cells")

    plan = scheme.plan(loaded.model)
    trajectory = run_quantized_oracle(cell, loaded.model, loaded.dtype, plan,
                                      keep_values=keep_values)
    return Golden(
        stamp=expected_stamp(cell, model_fingerprint(cell.model)),
        oracle=QUANTIZED_ORACLE_NAME,
        dtype=loaded.dtype,
        serial_check="skipped: the reference is the serial quantized run itself",
        oracle_bug=None,
        trajectory=trajectory,
    )


def regen_cell(cell: Cell, root: Path) -> RegenOutcome:
    path = golden_path(root, backend_key(), cell.golden_stem)
    try:
        golden = make_golden(cell, keep_values=_kl_gated(cell))
    except Exception:  # noqa: BLE001 - report and go on with the other scenarios
        return RegenOutcome(scenario_id=cell.scenario_id, path=path, serial_check="",
                            error=traceback.format_exc())
    write_golden(path, golden)
    return RegenOutcome(scenario_id=cell.scenario_id, path=path,
                        serial_check=golden.serial_check)


def regen_all(scenarios: list[Cell], root: Path, jobs: int, console):
    """Yield a RegenOutcome per scenario, with a progress bar; ``jobs`` worker processes."""
    from rich.progress import Progress

    with Progress(console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("oracle", total=len(scenarios))
        for outcome in _map(scenarios, root, jobs):
            progress.advance(task)
            yield outcome


def _map(scenarios: list[Cell], root: Path, jobs: int):
    if jobs <= 1:
        for cell in scenarios:
            yield regen_cell(cell, root)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")  # MLX state does not survive fork
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        yield from pool.map(regen_cell, scenarios, [root] * len(scenarios), chunksize=4)
