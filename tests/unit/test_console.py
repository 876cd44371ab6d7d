"""What a log or a pipe shows: progress lines, an 80-column grid, text kept as text."""

import io
import os
import re
from types import SimpleNamespace

from rich.console import Console

from batchlab.cells.result import CellResult
from batchlab.cli import main
from batchlab.report.console import LiveProgress, print_problems, print_tables
from batchlab.report.progress import ProgressLines
from batchlab.status import Status

SCRIPTS = [f"script-{i:02d}" for i in range(12)]  # far wider than 80 columns side by side
RERUN = ("batchlab matrix run --matrix matrices/default.toml --filter "
         "'l1/gemma2-gqa/B2/equal/join-evict/ctx-short'")


def log_console(width=80):
    return Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)


def result(status, model="gemma2-gqa", script="static", detail="d", rerun=RERUN, cell=None):
    return CellResult(cell_id=cell or f"l1/{model}/B2/equal/{script}/ctx-short", model=model,
                      path="l1", batch=2, padding="equal", script=script, context="short",
                      status=status, detail=detail, rerun=rerun, seconds=0.1, tokens=1)


def test_the_grid_fits_80_columns_and_names_the_worst_status_in_words():
    console = log_console()
    results = [result(Status.PASS, model=m, script=s) for m in ("llama", "qwen3") for s in SCRIPTS]
    results.append(result(Status.ORACLE_BUG, model="llama", script="script-03", cell="x"))
    print_tables(console, results)
    text = console.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert all(s in text for s in SCRIPTS)
    assert re.search(r"│ llama +│ .*1/2 o-bug", text)  # script-03 of llama: 1 of 2 passed
    assert text.count("│ qwen3 ") == len(re.findall(r"┃ model ", text)) >= 2


def test_problem_lines_keep_brackets_and_unbroken_rerun_commands():
    console = log_console()
    detail = "engine crashed: ValueError: bad [[cell]] #3 of matrices/x.toml: steps must be >= 1"
    print_problems(console, [result(Status.ERROR, detail=detail),
                             result(Status.ORACLE_BUG, detail="[bold]not markup[/]", cell="o")])
    text = console.file.getvalue()
    lines = text.splitlines()
    assert "bad [[cell]] #3 of" in " ".join(text.split())
    assert lines[:2] == ["ERROR l1/gemma2-gqa/B2/equal/static/ctx-short",
                         "    engine crashed: ValueError: bad [[cell]] #3 of matrices/x.toml: "
                         "steps must"]
    assert f"    rerun: {RERUN}" in lines  # one line, whatever the width: it is copied
    assert "[bold]not markup[/]" in text
    assert all(len(line) <= 80 for line in lines if not line.startswith("    rerun: "))
    assert lines[-3:] == ["ORACLE-BUG gemma2-gqa: 1 cells, e.g.", "    o",
                          "    [bold]not markup[/]"]  # indented, no trailing blanks


def test_progress_lines_every_25_items_every_10_s_and_at_the_end():
    console = log_console()
    now = [0.0]
    lines = ProgressLines(console, 60, "matrix", "cells", clock=lambda: now[0])
    for i in range(60):
        now[0] = i * 0.1 + (20.0 if i >= 30 else 0.0)  # a slow cell before the 31st
        lines.advance(f"{i} so far")
    assert console.file.getvalue().splitlines() == [
        "matrix: 25/60 cells, 24 so far, 2.4 s",
        "matrix: 31/60 cells, 30 so far, 23.0 s",
        "matrix: 50/60 cells, 49 so far, 24.9 s",
        "matrix: 60/60 cells, 59 so far, 25.9 s",
    ]


def test_live_progress_on_a_log_counts_failures_so_far():
    console = log_console()
    with LiveProgress(console, 2) as progress:
        progress.advance(result(Status.FAIL))
        progress.advance(result(Status.PASS))
    assert re.fullmatch(r"matrix: 2/2 cells, 1 failing so far \(FAIL 1, PASS 1\), \d+\.\d s\n",
                        console.file.getvalue())


def test_an_error_message_keeps_its_brackets(capsys):
    assert main(["matrix", "run", "--matrix", "matrices/quick.toml",
                 "--filter", "[[cell]] #3"]) == 2
    assert "--filter '[[cell]] #3'" in capsys.readouterr().out


def test_golden_regen_on_a_log_prints_progress(monkeypatch, tmp_path):
    from batchlab.cells.spec import load_matrix
    from batchlab.commands.golden import regen_command
    from batchlab.golden.check import unique_scenarios
    from batchlab.oracle import regen

    def fake_regen_all(scenarios, root, jobs, console):
        for k, cell in enumerate(scenarios):
            yield regen.RegenOutcome(scenario_id=cell.scenario_id, path=root / "x.json",
                                     serial_check="oracle-bug" if k == 0 else "agrees",
                                     error="Traceback: [[cell]] #3" if k == 1 else None)

    monkeypatch.setattr(regen, "regen_all", fake_regen_all)
    total = len(unique_scenarios(load_matrix("matrices/quick.toml")))
    args = SimpleNamespace(matrix="matrices/quick.toml", filter=None, goldens=tmp_path, jobs=1)
    console = log_console(width=200)
    assert regen_command(args, console) == 1
    lines = console.file.getvalue().splitlines()
    progress = [line for line in lines if line.startswith("oracle: ")]
    assert total == 19 and len(progress) == 1  # fewer than 25, all within 10 s: the last
    assert progress[0].startswith(
        "oracle: 19/19 goldens, 1 oracle errors, 1 oracle-bug so far, ")
    assert "Traceback: [[cell]] #3" in lines


def test_judging_commands_run_float32_matmuls_at_float32_and_the_bench_keeps_tf32(
        monkeypatch, capsys):
    """A command that judges against an oracle sets MLX_ENABLE_TF32=0 before MLX is
    imported (the gate's float32 bounds assume float32 rounding; TF32 failed 7 float32
    cells on the H200); others keep MLX's default, and a value the user set stands."""
    from batchlab.cli import TF32_ENV

    monkeypatch.delenv(TF32_ENV, raising=False)
    quick = ["matrix", "list", "--matrix", "matrices/quick.toml", "--filter", "no-such-cell"]
    assert main(quick) == 0
    assert os.environ[TF32_ENV] == "0"
    monkeypatch.setenv(TF32_ENV, "1")
    assert main(quick) == 0
    assert os.environ[TF32_ENV] == "1"
    monkeypatch.delenv(TF32_ENV)
    main(["bench", "report", "--out", "/nonexistent-batchlab-bench"])
    assert TF32_ENV not in os.environ
    capsys.readouterr()


def test_matrix_list_prints_each_id_on_one_line_however_narrow_the_console():
    """Piped into wc, grep or a --filter, an id split over two lines is two wrong ids."""
    from batchlab.cells.select import select
    from batchlab.cells.spec import load_matrix
    from batchlab.commands.matrix import list_command

    console = log_console(width=40)
    args = SimpleNamespace(matrix="matrices/default.toml", filter="pb2_cb2")
    assert list_command(args, console) == 0
    ids = [c.id for c in select(load_matrix("matrices/default.toml"), "pb2_cb2", None)]
    assert max(len(i) for i in ids) > 40
    assert console.file.getvalue().splitlines() == [*ids, f"{len(ids)} cells"]
