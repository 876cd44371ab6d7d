"""The subject protocol: any engine driven by the matrix, and seeded bugs caught in each
mode (in-process, through the process protocol, from files); a peer that crashes, hangs
or speaks out of protocol is ERROR for its cell only.

Cells are two quick ones of the default matrix, judged against the committed goldens.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from loaded_matrices import matrix_cells

from batchlab.cells.select import select
from batchlab.defaults import DEFAULT_GOLDENS, DEFAULT_MATRIX
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.matrix.runner import run_cells
from batchlab.status import Status
from batchlab.subjects.capabilities import refusal
from batchlab.subjects.choose import close_subjects
from batchlab.subjects.files import export_scripts, play_scripts, stem
from batchlab.subjects.protocol import Capabilities

HERE = Path(__file__).parent
STATIC = "l1/llama/B4/equal/static/ctx-short"
WRAP = "l1/llama/B4/equal/static/ctx-wrap"
CELLS = {c.id: c for c in select(matrix_cells(DEFAULT_MATRIX), f"{STATIC},{WRAP}", None)}
PEER = f"process:{sys.executable} {HERE / 'subject_peers.py'}"


def ref(engine: str) -> Reference:
    return Reference(matrix="matrices/default.toml", goldens=DEFAULT_GOLDENS, engine=engine)


@pytest.fixture(autouse=True)
def _fresh_peers(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    yield
    close_subjects()


def run(engine: str, *ids: str) -> list:
    return run_cells([CELLS[i] for i in ids], ref(engine), isolate=False)


WRONG = {"row": "B", "index": 2, "what": "token"}


def test_batchlab_and_mlx_lm_subjects_pass():
    assert [r.status for r in run("batchlab", STATIC)] == [Status.PASS]
    assert [r.status for r in run("mlx-lm", STATIC)] == [Status.PASS]


def test_a_broken_subject_in_process_fails_at_its_bug():
    (r,) = run("subject_peers:wrong_token", STATIC)
    assert r.status is Status.FAIL
    assert {k: r.divergence[k] for k in WRONG} == WRONG
    assert r.divergence["got_token"] == r.divergence["expected_token"] + 1
    assert "--engine subject_peers:wrong_token" in r.rerun


def test_a_broken_subject_through_the_process_protocol_fails_at_its_bug():
    (r,) = run(f"{PEER} wrong-token {STATIC}", STATIC)
    assert r.status is Status.FAIL
    assert {k: r.divergence[k] for k in WRONG} == WRONG


@pytest.mark.parametrize("mode, says", [
    ("crash", "exited (code 3) before answering 'step'"),
    ("garbage", "answered 'step' out of protocol (not one JSON object per line)"),
])
def test_a_peer_that_breaks_is_error_for_its_cell_only(mode, says):
    broken, fine = run(f"{PEER} {mode} ctx-short", STATIC, WRAP)
    assert broken.status is Status.ERROR and fine.status is Status.PASS
    assert broken.detail.startswith("subject broke: subject process ")
    assert says in broken.detail


def test_a_peer_that_hangs_is_error_after_the_timeout(monkeypatch):
    # 1 s is only ever waited out: the peer hangs at its first 'step', and 'hello' and
    # 'open' (imports, the model's load) are given START_TIMEOUT whatever this says
    monkeypatch.setenv("BATCHLAB_SUBJECT_TIMEOUT", "1")
    (r,) = run(f"{PEER} hang ctx-short", STATIC)
    assert r.status is Status.ERROR
    assert "gave no answer to 'step' within 1 s (hung?)" in r.detail


def test_files_round_trip_passes_and_a_corrupt_trajectory_fails(tmp_path):
    from batchlab.subjects.engine import BatchlabSubject
    from batchlab.zoo.load import resolve

    cells = list(CELLS.values())
    assert export_scripts(cells, tmp_path, {"llama": str(resolve("llama"))}) == 2
    assert play_scripts(BatchlabSubject(), tmp_path / "scripts", tmp_path / "out") == 2
    engine = f"files:{tmp_path / 'out'}"
    assert [r.status for r in run(engine, STATIC, WRAP)] == [Status.PASS, Status.PASS]
    path = tmp_path / "out" / (stem(STATIC, CELLS[STATIC].definition_digest()) + ".json")
    d = json.loads(path.read_text())
    d["rows"]["B"][2]["token"] += 1
    path.write_text(json.dumps(d))
    (wrap := tmp_path / "out" / (stem(WRAP, CELLS[WRAP].definition_digest()) + ".json")).unlink()
    bad, missing = run(engine, STATIC, WRAP)
    assert bad.status is Status.FAIL and {k: bad.divergence[k] for k in WRONG} == WRONG
    assert bad.rerun.startswith("batchlab matrix judge ")
    assert missing.status is Status.ERROR and f"no trajectory {wrap}" in missing.detail


def test_a_cell_beyond_the_declared_capabilities_is_unsupported_with_the_reason():
    cell = CELLS[STATIC]
    assert refusal("x", Capabilities(paths=("l1",)), cell) is None
    assert refusal("x", Capabilities(paths=("l1",)), replace(cell, path="kv8")) == (
        "subject x runs paths l1; this cell asks for path kv8")
    assert refusal("x", Capabilities(controls_join=True), cell) == (
        "subject x decides itself when a queued row joins; the batch oracle's bits depend "
        "on the step each row joins at, so only B=1 cells are judged")
    r = evaluate_cell(replace(cell, path="fast"), ref("mlx-lm"))  # an l1 golden
    assert r.status is Status.UNSUPPORTED
    assert r.detail == "subject mlx-lm runs paths l1; this cell asks for path fast"


STANDALONE = HERE.parent.parent / "oracles" / "peers" / "mlx_lm_peer.py"


def test_the_standalone_peer_is_built_from_mlx_lm_alone():
    import ast

    tree = ast.parse(STANDALONE.read_text())
    roots = {(n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
             for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
             for a in n.names}
    assert roots - set(sys.stdlib_module_names) == {"mlx", "mlx_lm"}


def test_the_standalone_peer_passes_and_plays_a_subject_bug(monkeypatch):
    engine = f"process:{sys.executable} {STANDALONE}"
    assert [r.status for r in run(engine, STATIC)] == [Status.PASS]
    close_subjects()
    monkeypatch.setenv("BATCHLAB_PEER_BUG", "subject-stale-logprobs")
    (r,) = run(engine, STATIC)
    assert r.status is Status.FAIL
    assert {k: r.divergence[k] for k in ("row", "index", "what")} == {
        "row": "A", "index": 1, "what": "bits"}


def test_selftest_modes_say_which_bugs_reach_a_subject():
    from batchlab.selftest.catalog import select_bugs
    from batchlab.selftest.modes import mode_for

    engine_bug, = select_bugs("scalar-offset")
    subject_bug, = select_bugs("subject-ignores-remove")
    fault, = select_bugs("peer-hangs")
    assert mode_for("batchlab").skip(engine_bug) is None
    assert mode_for("mlx-lm").skip(engine_bug) == (
        "patches batchlab's engine, which subject mlx-lm does not run")
    assert mode_for("mlx-lm").skip(subject_bug) is None
    assert mode_for("files:x").skip(fault) == (
        "a peer fault needs a process peer (--engine 'process:...')")


def test_a_subject_bug_is_caught_from_files():
    from batchlab.selftest.run import run_selftest

    report = run_selftest(DEFAULT_MATRIX, DEFAULT_GOLDENS, bug="subject-step-late",
                          engine="files", load=matrix_cells)
    (kill,) = report.kills
    assert report.ok and kill.caught
    assert [r.status for r in kill.results] == [Status.FAIL, Status.FAIL]
    assert kill.results[0].divergence["what"] == "step"
    assert kill.results[0].rerun.startswith("batchlab matrix judge ")


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_javascript_peer_replays_trajectories_through_the_protocol(tmp_path):
    from batchlab.subjects.engine import BatchlabSubject
    from batchlab.zoo.load import resolve

    export_scripts([CELLS[STATIC]], tmp_path, {"llama": str(resolve("llama"))})
    play_scripts(BatchlabSubject(), tmp_path / "scripts", tmp_path / "out")
    engine = f"process:node {STANDALONE.parent / 'replay_peer.js'} {tmp_path / 'out'}"
    assert [r.status for r in run(engine, STATIC)] == [Status.PASS]
    path = tmp_path / "out" / (stem(STATIC, CELLS[STATIC].definition_digest()) + ".json")
    d = json.loads(path.read_text())
    d["rows"]["B"][2]["token"] += 1
    path.write_text(json.dumps(d))
    (r,) = run(engine, STATIC)
    assert r.status is Status.FAIL and {k: r.divergence[k] for k in WRONG} == WRONG


def test_a_bug_whose_cells_a_subject_refuses_cannot_reach_it():
    from batchlab.selftest.run import run_selftest

    report = run_selftest(DEFAULT_MATRIX, DEFAULT_GOLDENS, bug="subject-drops-parked-history",
                          engine="subject_peers:no_history", load=matrix_cells)
    assert [r.status for r in report.control] == [Status.UNSUPPORTED, Status.UNSUPPORTED]
    assert report.dirty_control == []
    (kill,) = report.kills
    assert kill.skipped == ("its cells are UNSUPPORTED here: subject batchlab declares no "
                            "history (prefix, park/resume, continue); this cell uses it")
    assert not report.ok  # nothing ran: nothing is proven
