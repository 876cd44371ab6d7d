"""A cell that kills its worker process is that cell's ERROR; the run goes on to the end.

The crash is real: a worker initializer (given by the test, run in the spawned worker)
wraps the engine's ``run_cell`` so that chosen cells segfault, abort or ``os._exit`` the
worker. Nothing in batchlab/engine knows about it.
"""

import ctypes
import functools
import os
import xml.etree.ElementTree as ET

import pytest

from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.cli import DEFAULT_GOLDENS, main
from batchlab.commands import matrix as commands
from batchlab.matrix.evaluate import Reference
from batchlab.matrix.runner import run_cells
from batchlab.report.files import read_results
from batchlab.status import Status

QUICK = "matrices/quick.toml"
CELLS = select(load_matrix(QUICK), "l1/llama/", None)
REF = Reference(matrix=QUICK, goldens=DEFAULT_GOLDENS)
MIDDLE = CELLS[2].id
FEW = CELLS[:3]  # enough for two crashes and a pass

_CRASHES = {
    "segfault": lambda: ctypes.string_at(0),  # reads address 0: SIGSEGV
    "abort": os.abort,  # SIGABRT, as a failed C assert does
    "exit": lambda: os._exit(3),  # no signal, no stack
}


def crash_on(cell_ids: tuple[str, ...], how: str) -> None:
    """Worker initializer: the engine's run of any of ``cell_ids`` takes the process down."""
    import batchlab.matrix.engine_run as engine_run

    real = engine_run.run_cell

    def run_cell(cell):
        if cell.id in cell_ids:
            _CRASHES[how]()
        return real(cell)

    engine_run.run_cell = run_cell


def test_a_segfault_in_one_cell_is_its_error_and_the_run_writes_every_report(
        tmp_path, monkeypatch):
    report = tmp_path / "report"
    init = functools.partial(crash_on, (MIDDLE,), "segfault")
    monkeypatch.setattr(commands, "run_cells", functools.partial(run_cells, worker_init=init))
    status = main(["matrix", "run", "--matrix", QUICK, "--filter", "l1/llama/",
                   "--report", str(report), "--jobs", "1"])
    assert status == 1
    results = read_results(report)
    assert sorted(r.cell_id for r in results) == sorted(c.id for c in CELLS)
    by_id = {r.cell_id: r for r in results}
    crashed = by_id[MIDDLE]
    assert crashed.status == Status.ERROR
    assert "worker process died running this cell (killed by signal SIGSEGV (11))" in (
        crashed.detail)
    assert "Segmentation fault" in crashed.traceback and "run_cell" in crashed.traceback
    assert crashed.rerun == f"batchlab matrix run --matrix {QUICK} --filter '{MIDDLE}'"
    assert {r.status for i, r in by_id.items() if i != MIDDLE} == {Status.PASS}
    suite = ET.parse(report / "junit.xml").getroot()
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("6", "1", "0")
    assert "5/6 cells passed (0 unsupported, 0 oracle-bug)" in (
        report / "summary.md").read_text()


@pytest.mark.parametrize(("how", "jobs", "victims", "death"), [
    ("abort", 2, (FEW[0].id, FEW[2].id), "killed by signal SIGABRT (6)"),
    ("exit", 1, (FEW[0].id, FEW[1].id), "exit code 3"),  # in a row: each fresh worker dies
])
def test_every_crashed_cell_is_an_error_in_matrix_order(how, jobs, victims, death):
    seen = []
    results = run_cells(FEW, REF, jobs=jobs, on_result=seen.append,
                        worker_init=functools.partial(crash_on, victims, how))
    assert [r.cell_id for r in results] == [c.id for c in FEW]
    assert sorted(r.cell_id for r in seen) == sorted(c.id for c in FEW)
    assert [(r.cell_id, r.status) for r in results] == [
        (c.id, Status.ERROR if c.id in victims else Status.PASS) for c in FEW]
    for r in results:
        if r.cell_id in victims:
            assert death in r.detail and r.tokens == 0
    if how == "exit":  # os._exit runs no fault handler: the detail says so
        assert all(r.traceback is None for r in results if r.cell_id in victims)
        assert "no Python stack was written" in results[0].detail


def fail_to_start() -> None:
    raise ImportError("no module named mlx (a broken install)")


def test_a_worker_that_cannot_start_blames_no_cell():
    from batchlab.matrix.workers import WorkerStartError

    seen = []
    with pytest.raises(WorkerStartError, match=r"died before it could run a cell \(exit code 1\)"):
        run_cells(FEW, REF, on_result=seen.append, worker_init=fail_to_start)
    assert seen == []


def test_in_process_runs_refuse_what_only_workers_can_do():
    with pytest.raises(ValueError, match="in-process runs have one job"):
        run_cells(CELLS, REF, jobs=2, isolate=False)
