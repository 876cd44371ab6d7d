"""``batchlab selftest``: inject each seeded bug, run its candidate cells, count the kills.

A gate that never fails proves nothing. For every bug of the catalog the candidate cells
run in this process against the committed goldens with the bug patched in; the bug is
caught when a candidate turns FAIL (ERROR for the few bugs that crash by nature: see
``SeededBug.caught_as``). First, a control: the same cells with no
bug, which must all be PASS (or ORACLE-BUG). A dirty control means the self-test cannot
judge anything (stale goldens, or the engine already failing), so it stops there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from batchlab.cells.cell import Cell
from batchlab.cells.result import CellResult
from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.defaults import PROJECT_ROOT
from batchlab.display import shown
from batchlab.selftest.catalog import SeededBug, select_bugs
from batchlab.selftest.inject import InjectionError
from batchlab.selftest.modes import mode_for, reference
from batchlab.status import Status

KILLING = frozenset({Status.FAIL, Status.ERROR})  # the engine went wrong; STALE is no kill
CLEAN = frozenset({Status.PASS, Status.ORACLE_BUG})
SHOWN_CELLS = 2
LOG_WIDTH = 170


@dataclass(frozen=True, slots=True, kw_only=True)
class Kill:
    """One bug's outcome: its candidates' results with the bug injected."""

    bug: SeededBug
    results: tuple[CellResult, ...]
    broken: str | None = None  # why the bug could not be injected at all
    skipped: str | None = None  # why it cannot reach this subject (not run, not a miss)

    @property
    def killers(self) -> list[CellResult]:
        """Candidates that went FAIL or ERROR, the expected kind first."""
        hits = [r for r in self.results if r.status in KILLING]
        return sorted(hits, key=lambda r: r.status != self.bug.caught_as)

    @property
    def caught(self) -> bool:
        if self.bug.kind == "peer":  # ERROR for the faulty cell only; the run went on
            first, *rest = self.results or (None,)
            return (first is not None and first.status is Status.ERROR
                    and first.detail.startswith("subject broke:")
                    and all(r.status in CLEAN for r in rest))
        return any(r.status == self.bug.caught_as for r in self.results)

    def verdict(self) -> str:
        if self.skipped:
            return "n/a"
        if self.broken:
            return "[bold red]NO[/] (not injected)"
        if self.caught:
            return "[green]yes[/]"
        if self.bug.kind == "peer" and self.results and self.results[0].status is Status.ERROR:
            return "[bold red]NO[/] (the fault reached other cells)"
        if self.killers:  # e.g. only ERROR for a silent bug: the patch itself may be broken
            return f"[bold red]NO[/] (no {self.bug.caught_as}: injector broken?)"
        return "[bold red]NO[/]"


@dataclass(frozen=True, slots=True, kw_only=True)
class SelftestReport:
    control: tuple[CellResult, ...]  # every candidate cell, no bug injected
    kills: tuple[Kill, ...]  # empty when the control is dirty (nothing was injected)
    seconds: float
    engine: str = "batchlab"

    @property
    def run_kills(self) -> list[Kill]:
        return [k for k in self.kills if not k.skipped]

    @property
    def dirty_control(self) -> list[CellResult]:
        """UNSUPPORTED is clean too: a subject that declares less (no history, say) leaves
        those cells out, and bugs whose cells are all out cannot reach it."""
        return [r for r in self.control if r.status not in CLEAN | {Status.UNSUPPORTED}]

    @property
    def ok(self) -> bool:
        return (not self.dirty_control and bool(self.run_kills)
                and all(k.caught for k in self.run_kills))

    def summary(self) -> str:
        if self.dirty_control:
            return f"self-test broken: {len(self.dirty_control)} control cells not PASS"
        caught = sum(k.caught for k in self.run_kills)
        skipped = len(self.kills) - len(self.run_kills)
        na = f" ({skipped} cannot reach subject {self.engine})" if skipped else ""
        return f"{caught}/{len(self.run_kills)} seeded bugs caught{na}"


def candidates_of(bugs: list[SeededBug],
                  cells_of: dict[str | None, list[Cell]]) -> dict[str, list[Cell]]:
    """Each bug's candidates among the cells of its matrix (``cells_of[bug.matrix]``)."""
    out = {}
    for bug in bugs:
        found = select(cells_of[bug.matrix], bug.cells, None)
        if not found:
            raise ValueError(f"seeded bug {bug.name}: no cell of the matrix matches "
                             f"{bug.cells!r}; update its filter in "
                             "batchlab/selftest/catalog_engine.py or catalog_rounds.py")
        out[bug.name] = found
    return out


def candidates(bug: SeededBug, cells: list[Cell]) -> list[Cell]:
    return candidates_of([bug], {bug.matrix: cells})[bug.name]


def run_selftest(
    matrix: Path,
    goldens: Path,
    bug: str | None = None,
    on_step: Callable[[str], None] = lambda text: None,
    engine: str = "batchlab",
    first_catch: bool = False,
    load: Callable[[Path], list[Cell]] = load_matrix,
) -> SelftestReport:
    """Control first, then each bug (always un-patched afterwards, see ``inject.applied``),
    on the subject ``engine`` names, through its mode (``modes.py``). ``first_catch``
    stops each bug at its first catching cell: caught or not is the same answer, in less
    time, but "killed by" then counts one cell. ``load`` reads a matrix file (the test
    suite passes one that reads each file once per process)."""
    start = time.perf_counter()
    bugs = select_bugs(bug)
    matrices = {None: Path(matrix)} | {b.matrix: PROJECT_ROOT / b.matrix for b in bugs if b.matrix}
    cells_of = {key: load(path) for key, path in matrices.items()}
    per_bug = candidates_of(bugs, cells_of)
    shown_of = {c.id: shown(matrices[b.matrix]) for b in bugs for c in per_bug[b.name]}
    base = {m: reference(m, Path(goldens)) for m in set(shown_of.values())}

    def ref_of(cell: Cell, subject: str):  # shown: the rerun lines
        return base[shown_of[cell.id]](cell, subject)

    order = {c.id: i for i, c in enumerate(c for cells in cells_of.values() for c in cells)}
    mode = mode_for(engine)
    try:
        skips = {b.name: mode.skip(b) for b in bugs}
        union = {c.id: c for b in bugs if not skips[b.name] for c in per_bug[b.name]}
        on_step(f"control: {len(union)} cells, no bug, subject {engine}")
        control = tuple(mode.control(sorted(union.values(), key=lambda c: order[c.id]), ref_of))
        if any(r.status not in CLEAN | {Status.UNSUPPORTED} for r in control):
            return SelftestReport(control=control, kills=(), engine=engine,
                                  seconds=time.perf_counter() - start)
        beyond = {r.cell_id: r.detail for r in control if r.status is Status.UNSUPPORTED}
        kills = []
        for b in bugs:
            cells = [c for c in per_bug[b.name] if c.id not in beyond]
            if not skips[b.name] and not cells:
                skips[b.name] = f"its cells are UNSUPPORTED here: {beyond[per_bug[b.name][0].id]}"
            if skips[b.name]:
                kills.append(Kill(bug=b, results=(), skipped=skips[b.name]))
                continue
            on_step(f"{b.name}: {len(cells)} cells")
            try:
                results = tuple(mode.run(b, cells, ref_of, first_catch))
            except InjectionError as err:  # evaluate_cell never raises: this is the patching
                kills.append(Kill(bug=b, results=(), broken=str(err)))
                continue
            kills.append(Kill(bug=b, results=results))
    finally:
        mode.close()
    return SelftestReport(control=control, kills=tuple(kills), engine=engine,
                          seconds=time.perf_counter() - start)


def how(result: CellResult) -> str:
    """``FAIL row C token #0 (step 2): token; ...`` or ``ERROR engine crashed: ...``."""
    text = f"{result.status} {result.detail}"
    return text if len(text) <= 90 else text[:87] + "..."


def print_report(console, report: SelftestReport) -> None:
    from rich.markup import escape
    from rich.table import Table

    dirty = report.dirty_control
    if dirty:
        console.print(f"[bold red]the self-test is broken:[/] {len(dirty)} of "
                      f"{len(report.control)} control cells (no bug injected) are not PASS; "
                      "no bug was run. Fix these first:", highlight=False)
        for r in dirty:
            console.print(f"  {r.status} {escape(r.cell_id)}: {escape(r.detail)}\n"
                          f"    rerun: {escape(r.rerun)}", highlight=False)
        return
    table = Table(title="seeded batching bugs: does the gate fail?", title_justify="left")
    for name in ("bug", "caught", "killed", "by cells", "how (first kill)"):
        table.add_column(name, overflow="fold")
    for k in report.kills:
        killers = k.killers
        ids = ", ".join(r.cell_id.removeprefix("l1/") for r in killers[:SHOWN_CELLS])
        more = f" +{len(killers) - SHOWN_CELLS}" if len(killers) > SHOWN_CELLS else ""
        table.add_row(
            k.bug.name,
            k.verdict(),
            f"{len(killers)}/{len(k.results)}",
            escape(ids + more),
            escape(k.skipped or k.broken
                   or (how(killers[0]) if killers else "every candidate passed")),
        )
    console.print(table)
    out = sum(r.status is Status.UNSUPPORTED for r in report.control)
    beyond = f" ({out} UNSUPPORTED by subject {escape(report.engine)}: left out)" if out else ""
    console.print(f"control: {len(report.control)} cells with no bug injected, all PASS or "
                  f"ORACLE-BUG{beyond}", style="dim", highlight=False, emoji=False)
    if len(report.kills) <= 3:  # a --bug run: say what was injected and why it matters
        for k in report.kills:
            console.print(f"[bold]{k.bug.name}[/]: {escape(k.bug.description)}\n"
                          f"  history: {escape(k.bug.history)}\n  cells: {k.bug.cells}",
                          highlight=False)


def selftest_command(args, console) -> int:
    import os

    from rich.markup import escape

    from batchlab.subjects.choose import check_engine

    engine = getattr(args, "engine", "batchlab")
    if not engine.startswith("files"):  # files[:DIR]: the self-test writes the folder
        check_engine(engine)
    if getattr(args, "timeout", None):
        os.environ["BATCHLAB_SUBJECT_TIMEOUT"] = str(args.timeout)
    with console.status("self-test") as status:
        report = run_selftest(args.matrix, args.goldens, args.bug,
                              on_step=lambda text: status.update(f"self-test: {text}"),
                              engine=engine, first_catch=getattr(args, "first_catch", False))
    if not console.is_terminal and console.width < LOG_WIDTH:  # a log or a pipe: don't fold
        from rich.console import Console

        console = Console(file=console.file, width=LOG_WIDTH)
    print_report(console, report)
    verdict = "[green]gate OK[/]" if report.ok else "[bold red]gate NOT proven[/]"
    console.print(f"[bold]{escape(report.summary())}[/] ({verdict}); subject {escape(engine)}; matrix "
                  f"{shown(args.matrix)}, "
                  f"wall time {report.seconds:.1f} s", highlight=False, emoji=False)
    return 0 if report.ok else 1
