"""Cells run in worker processes that may die: a dead worker is one cell's ERROR.

A cell can take its process down with it (a segfault in native code, an abort, an
``os._exit``), e.g. a cache bug that hands MLX an out-of-range index. The supervisor
knows which cell each worker is running, so when one dies it records that cell as ERROR
(the signal or exit code, the Python stack faulthandler wrote at the crash, the rerun
command), starts a fresh worker and goes on; the run still writes every report. A
worker that dies before it says it is ready blames no cell: the run stops with
WorkerStartError (every worker would die the same way).

    parent                         worker (spawned, one cell at a time)
                     <---------    "ready" (imports and initializer done)
    send cell        --------->    evaluate_cell(cell, ref)
    yield result     <---------    send CellResult
    sentinel fires   <---------    dies: ERROR for the cell it held, new worker

Cells are handed out one at a time, so a crash costs only its own cell and a slow model
never holds others back. An idle worker takes the next cell of the model it last ran
(its model stays loaded), else the first cell of a model no other worker is on. The
real checkpoint's cells, the slowest by far, are handed out first.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from batchlab.cells.cell import Cell
from batchlab.cells.result import CellResult
from batchlab.matrix.evaluate import Reference, evaluate_cell, rerun_command
from batchlab.status import Status
from batchlab.zoo.real import REAL

# spawn, not fork: MLX keeps threads and device state that do not survive a fork.
_CONTEXT = multiprocessing.get_context("spawn")
_READY = "ready"  # a worker's first message: imports and initializer done


class WorkerStartError(ValueError):
    """No worker process could start (an import or the initializer failed): that is no
    cell's fault, so the run stops here. A ValueError: the CLI prints it as one line."""


def _worker_main(conn: Connection, ref: Reference, fault_log: str,
                 initializer: Callable[[], None] | None) -> None:
    # Ctrl-C reaches the whole process group: the parent handles it and ends the workers;
    # a worker that died of it would be recorded as its cell's crash.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(fault_log, "w") as log:
        faulthandler.enable(file=log, all_threads=True)
        if initializer is not None:
            initializer()
        conn.send(_READY)
        try:
            while True:
                try:
                    cell = conn.recv()
                except EOFError:  # the parent is gone
                    return
                if cell is None:
                    return
                conn.send(evaluate_cell(cell, ref))
        finally:
            from batchlab.subjects.choose import close_subjects

            close_subjects()  # a process subject ends with its worker


@dataclass(slots=True, kw_only=True)
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    fault_log: Path
    cell: Cell | None = None  # the cell it is running
    ready: bool = False  # it said so: a death from now on is its cell's
    model: str | None = None  # the model it ran last (loaded in it)
    since: float = field(default_factory=time.perf_counter)


class WorkerPool:
    """``for result in WorkerPool(ref, jobs).run(cells)``: results as cells finish.

    ``initializer`` runs in each fresh worker before its first cell (a test uses it to
    make one cell crash its worker); it must be picklable (a module-level function)."""

    def __init__(self, ref: Reference, jobs: int,
                 initializer: Callable[[], None] | None = None):
        self.ref, self.jobs, self.initializer = ref, jobs, initializer
        self._folder = tempfile.TemporaryDirectory(prefix="batchlab-workers-")
        self._started = 0

    def run(self, cells: list[Cell]) -> Iterator[CellResult]:
        # the real checkpoint's cells first (~0.3 s a decode step against the zoo's ~0.01):
        # last in matrix order, the last one handed out could leave the other worker idle
        # for most of its length; first, the tail is zoo cells of a fraction of a second
        pending = sorted(cells, key=lambda c: c.model not in REAL)
        workers = [self._start() for _ in range(min(self.jobs, len(cells)))]
        try:
            while pending or any(w.cell for w in workers):
                for w in workers:
                    if w.cell is None and pending:
                        self._hand_out(w, pending, workers)
                busy = [w for w in workers if w.cell]
                ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
                for i, w in enumerate(workers):
                    if w.cell is None or not {w.conn, w.process.sentinel} & ready:
                        continue
                    result = self._receive(w)
                    if isinstance(result, str):  # _READY
                        continue
                    if result is None:  # it died: its cell is an ERROR, a new one takes over
                        result = self._crash_result(w)
                        workers[i] = self._start()
                    yield result
        finally:
            self._stop(workers)

    def _start(self) -> _Worker:
        self._started += 1
        fault_log = Path(self._folder.name) / f"worker-{self._started}.log"
        parent, child = _CONTEXT.Pipe()
        process = _CONTEXT.Process(target=_worker_main, daemon=True,
                                   args=(child, self.ref, str(fault_log), self.initializer))
        process.start()
        child.close()  # the parent's copy: recv() sees EOF once the worker is gone
        return _Worker(process=process, conn=parent, fault_log=fault_log)

    @staticmethod
    def _hand_out(worker: _Worker, pending: list[Cell], workers: list[_Worker]) -> None:
        others = {w.model for w in workers if w is not worker and w.cell}
        pick = next((c for c in pending if c.model == worker.model), None)
        pick = pick or next((c for c in pending if c.model not in others), pending[0])
        pending.remove(pick)
        worker.cell, worker.model, worker.since = pick, pick.model, time.perf_counter()
        # a worker that died before its first cell: its sentinel reports the death
        with contextlib.suppress(OSError):
            worker.conn.send(pick)

    @staticmethod
    def _receive(worker: _Worker) -> CellResult | str | None:
        """The next message (a result, or _READY), or None once the worker is dead."""
        try:
            if worker.conn.poll():
                message = worker.conn.recv()
                if message == _READY:
                    worker.ready = True
                    return message
                worker.cell = None
                return message
        except (EOFError, OSError):  # died mid-message
            pass
        worker.process.join()
        return None

    def _crash_result(self, worker: _Worker) -> CellResult:
        cell, code = worker.cell, worker.process.exitcode
        how = _death(code)
        if not worker.ready:
            raise WorkerStartError(f"a worker process died before it could run a cell ({how}); "
                                   "its error is printed above (stderr); no cell was blamed")
        worker.cell = None
        worker.conn.close()
        stack = worker.fault_log.read_text(errors="replace").strip() if \
            worker.fault_log.is_file() else ""
        return CellResult.of(
            cell, status=Status.ERROR, tokens=0, rerun=rerun_command(cell, self.ref),
            seconds=round(time.perf_counter() - worker.since, 3),
            detail=(f"worker process died running this cell ({how}); the run went on with "
                    "a fresh worker; rerun the cell alone to reproduce"
                    + ("" if stack else "; no Python stack was written")),
            traceback=stack or None,
        )

    def _stop(self, workers: list[_Worker]) -> None:
        for w in workers:
            if w.process.is_alive() and w.cell is None:
                with contextlib.suppress(OSError):
                    w.conn.send(None)
        for w in workers:
            w.process.join(timeout=5 if w.cell is None else 0)
            if w.process.is_alive():  # interrupted mid-cell, or stuck: end it
                w.process.terminate()
                w.process.join()
            w.conn.close()
        self._folder.cleanup()


def _death(exitcode: int | None) -> str:
    """``killed by signal SIGSEGV (11)`` or ``exit code 3``."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "signal"
        return f"killed by signal {name} ({-exitcode})"
    return f"exit code {exitcode}"
