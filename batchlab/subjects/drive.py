"""Run a cell's script through any subject: the one loop (``cells/drive.py``) the oracle
runs too, so a step's events land just before the same step for every subject.

The subject's emissions become a ``Trajectory`` here, on the harness's side: the digest
of a logprob row is taken from the bytes the subject handed over, never asked of it. A
refusal cell's rows go raw, one ``submit`` each, and its bad requests too
(``subjects/refusal.py``): a wrong answer raises ``RefusalMismatch``, the cell's FAIL.
"""

from __future__ import annotations

from dataclasses import replace

from batchlab.cells.cell import Cell, Row
from batchlab.cells.drive import drive_script
from batchlab.engine.paths.registry import Unsupported
from batchlab.subjects.capabilities import refusal
from batchlab.subjects.protocol import RowRequest, Setup, Subject
from batchlab.subjects.refusal import judge_answer
from batchlab.subjects.wire import row_dict
from batchlab.trajectory import Step, Trajectory, make_step


def setup_for(cell: Cell, model_dir: str | None = None) -> Setup:
    """What ``open`` gets; ``model_dir`` (default: where the cell's model lives) is what a
    subject outside batchlab loads with mlx-lm."""
    if model_dir is None:
        from batchlab.zoo.load import resolve

        model_dir = str(resolve(cell.model))
    return Setup(cell=cell.id, model=cell.model, model_dir=model_dir, path=cell.path,
                 schedule=cell.schedule, sampling=cell.sampling,
                 keeps_finished=any(e.action == "continue" for e in cell.events),
                 digest=cell.definition_digest())


def request(row: Row, history: str = "none") -> RowRequest:
    fresh = history == "none"
    return RowRequest(name=row.name, prompt=row.prompt if fresh else row.resume,
                      max_tokens=row.max_tokens, history=history,
                      prefix=row.prefix if fresh else (), sampling=row.sampling,
                      processors=row.processors)


def run_subject(cell: Cell, subject: Subject, keep_values: bool = True,
                setup: Setup | None = None) -> Trajectory:
    """Drive ``cell`` through ``subject``. Raises ``Unsupported`` when its declared
    capabilities (or its ``open``) refuse the cell; any other exception is the subject's."""
    reason = refusal(subject.name, subject.capabilities, cell)
    if reason:
        raise Unsupported(reason, reason=reason)
    dtype = subject.open(setup or setup_for(cell))
    cost_check = _row_cost_check(cell, subject)
    rows: dict[str, list[Step]] = {}
    try:
        def insert(batch: list[Row]) -> None:
            if cell.refusals:  # raw, one by one: the subject builds and checks each
                for r in batch:
                    judge_answer(subject, row_dict(request(r)), None)
            else:
                subject.insert([request(r) for r in batch])
            for r in batch:
                rows.setdefault(r.name, [])

        def step(n: int) -> None:
            for e in subject.step():
                record = getattr(e, "record", None)  # the engine's own emissions have none
                if record is not None:
                    rows[e.name].append(record if record.step == n else replace(record, step=n))
                else:
                    rows[e.name].append(make_step(n, e.token, e.logprobs, keep_values))
            if cost_check is not None:
                cost_check.check(subject.scheduler, n)

        drive_script(
            cell, insert=insert, step=step, active=lambda: subject.num_active > 0,
            remove=lambda batch: subject.remove([r.name for r in batch]),
            park=lambda batch: subject.remove([r.name for r in batch], park=True),
            resume=lambda batch: subject.insert([request(r, "parked") for r in batch]),
            continue_=lambda batch: subject.insert([request(r, "finished") for r in batch]),
            refuse=lambda r: judge_answer(subject, r.row(), r.expect))
    finally:
        subject.close()
    return Trajectory(rows={k: tuple(v) for k, v in rows.items()}, dtype=dtype)


def _row_cost_check(cell: Cell, subject: Subject):
    """A ``row-cost...`` cell on batchlab's engine checks serve's row-cost projection
    after every step (``subjects/row_cost.py``); other subjects have no such accounting."""
    from batchlab.subjects.engine import BatchlabSubject
    from batchlab.subjects.row_cost import RowCostCheck, wants_row_cost_check

    if not (wants_row_cost_check(cell.script) and isinstance(subject, BatchlabSubject)):
        return None
    return RowCostCheck(subject.model, type(subject.scheduler))
