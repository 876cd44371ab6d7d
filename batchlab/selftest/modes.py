"""How a seeded bug reaches the subject under test: ``batchlab selftest --engine E``.

    batchlab, mlx-lm, module:factory   in-process: the bug's patches are applied here
                                       (an engine bug patches batchlab's engine; a subject
                                       bug wraps whatever ``subject_for`` returns)
    process:CMD                        the peer plays the bug: it is started afresh with
                                       ``BATCHLAB_PEER_BUG=<name>`` and says in ``hello``
                                       which bugs it plays (``"plays"``); peer faults too
    files, files:DIR                   offline: the candidates' scripts are exported, run
                                       here by batchlab's subject with the bug applied
                                       into trajectory files, then judged from the files

A bug that cannot reach the subject (batchlab's engine bug against mlx-lm's
BatchGenerator, a peer fault without a peer, a bug the peer does not play) is not run:
the report says why, apart from the caught and the missed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from batchlab.cells.cell import Cell
from batchlab.cells.result import CellResult
from batchlab.judging.judging import Reference as JudgeReference
from batchlab.judging.judging import judging_for
from batchlab.matrix import engine_run
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.matrix.solo import forget_solo_runs, refusal, solo_cell
from batchlab.selftest.catalog import SeededBug
from batchlab.selftest.inject import applied
from batchlab.selftest.peer_faults import FAULT_CELL
from batchlab.subjects.choose import close_subjects, subject_for

PEER_BUG = "BATCHLAB_PEER_BUG"
TIMEOUT = "BATCHLAB_SUBJECT_TIMEOUT"
HANG_TIMEOUT = 20.0  # seconds the runner waits for a hung peer in the self-test
SELFTEST_PEER = "process:python -m batchlab.selftest.peer"


def mode_for(engine: str, workdir: Path | None = None):
    kind = engine.partition(":")[0]
    if kind == "process":
        return ProcessMode(engine)
    if kind == "files":
        folder = engine.partition(":")[2]
        return FilesMode(Path(folder) if folder else workdir)
    return InProcessMode(engine)


class InProcessMode:
    def __init__(self, engine: str):
        self.engine = engine

    def skip(self, bug: SeededBug) -> str | None:
        if bug.kind == "peer":
            return "a peer fault needs a process peer (--engine 'process:...')"
        if bug.kind in ("engine", "accounting") and self.engine != "batchlab":
            return f"patches batchlab's engine, which subject {self.engine} does not run"
        return None

    def control(self, cells: list[Cell], ref_of) -> list[CellResult]:
        return [evaluate_cell(c, ref_of(c, self.engine)) for c in cells]

    def run(self, bug: SeededBug, cells: list[Cell], ref_of,
            first_catch: bool = False) -> list[CellResult]:
        with applied(bug.inject()):
            return _fresh(lambda: _evaluate(bug, cells, ref_of, self.engine, first_catch))

    def close(self) -> None:
        pass


class ProcessMode(InProcessMode):
    def __init__(self, engine: str):
        super().__init__(engine)
        self.plays: set[str] | None = None

    def skip(self, bug: SeededBug) -> str | None:
        if self.plays is None:  # the control's peer said what it plays
            with _env({PEER_BUG: None}):
                self.plays = set(getattr(subject_for(self.engine), "plays", ()))
        if bug.name not in self.plays:
            return "the peer does not play it (its hello lists no such name in \"plays\")"
        return None

    def control(self, cells, ref_of):
        with _env({PEER_BUG: None}):  # the peer skip() started, if any, plays no bug
            return super().control(cells, ref_of)

    def run(self, bug, cells, ref_of, first_catch=False):
        env = {PEER_BUG: bug.name, FAULT_CELL: cells[0].id}
        if bug.name == "peer-hangs":
            env[TIMEOUT] = str(min(float(os.environ.get(TIMEOUT) or HANG_TIMEOUT), HANG_TIMEOUT))
        close_subjects()  # the next cell starts a peer that plays the bug
        try:
            with _env(env):
                return _fresh(lambda: _evaluate(bug, cells, ref_of, self.engine, first_catch))
        finally:
            close_subjects()

    def close(self) -> None:
        close_subjects()


class FilesMode(InProcessMode):
    """Export, run offline with the bug applied (batchlab's subject, in this process),
    judge from the trajectory files."""

    def __init__(self, folder: Path | None):
        super().__init__("batchlab")
        self.own = folder is None
        self.folder = Path(tempfile.mkdtemp(prefix="selftest-files-")) if folder is None else folder

    def skip(self, bug):
        if bug.kind == "peer":
            return "a peer fault needs a process peer (--engine 'process:...')"
        if bug.kind == "accounting":
            return "only the row-cost check of the in-process subject sees it, not a file"
        return None

    def control(self, cells, ref_of):
        return self._round("control", None, cells, ref_of)

    def run(self, bug, cells, ref_of, first_catch=False):
        # every script is played offline in one round: stopping early would save nothing
        return self._round(bug.name, bug, cells, ref_of)

    def _round(self, name: str, bug, cells, ref_of) -> list[CellResult]:
        from batchlab.subjects.files import export_scripts, play_scripts
        from batchlab.zoo.load import resolve

        here = self.folder / name
        shutil.rmtree(here, ignore_errors=True)
        scripts = exported(cells)
        export_scripts(scripts, here, {m: str(resolve(m)) for m in {c.model for c in scripts}})
        with applied(bug.inject()) if bug else contextlib.nullcontext():
            _fresh(lambda: play_scripts(engine_run.subject_for("batchlab"), here / "scripts",
                                        here / "trajectories"))
        engine = f"files:{here / 'trajectories'}"
        return _fresh(lambda: [evaluate_cell(c, ref_of(c, engine)) for c in cells])

    def close(self) -> None:
        if self.own:
            shutil.rmtree(self.folder, ignore_errors=True)


def _evaluate(bug: SeededBug, cells: list[Cell], ref_of, engine: str,
              first_catch: bool) -> list[CellResult]:
    """Each cell's result with the bug in; with ``first_catch``, none after the first that
    catches it (the bug's ``caught_as``). A peer fault is judged on every cell (the fault
    must stay in its own), so it always runs them all."""
    results = []
    for cell in cells:
        results.append(evaluate_cell(cell, ref_of(cell, engine)))
        if first_catch and bug.kind != "peer" and results[-1].status == bug.caught_as:
            break
    return results


def exported(cells: list[Cell]) -> list[Cell]:
    """The cells and the solo runs their solo gate compares with, once each (what
    ``batchlab matrix export`` writes)."""
    solo = [solo_cell(c, r) for c in cells
            if judging_for(c.path).reference is JudgeReference.SOLO and refusal(c) is None
            for r in c.rows]
    return list({(c.id, c.definition_digest()): c for c in [*cells, *solo]}.values())


def reference(matrix: str, goldens: Path):
    def ref_of(cell: Cell, engine: str) -> Reference:
        return Reference(matrix=matrix, goldens=goldens, engine=engine)

    return ref_of


def _fresh(run):
    """Solo references are runs of the (patched) subject: never reuse them across bugs."""
    forget_solo_runs()
    try:
        return run()
    finally:
        forget_solo_runs()


@contextlib.contextmanager
def _env(values: dict[str, str | None]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
