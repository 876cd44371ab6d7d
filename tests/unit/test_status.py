"""The status vocabulary: one enum, and what every printer reads from it."""

import json

import pytest

from batchlab.cells.result import CellResult
from batchlab.status import _TRAITS, Status, worst


def test_spellings_and_severity_order_are_the_reports():
    assert [str(s) for s in Status] == [
        "ERROR", "FAIL", "STALE", "NO-GOLDEN", "ORACLE-BUG", "UNSUPPORTED", "PASS"]
    assert [s.severity for s in Status] == list(range(7))
    assert Status.ORACLE_BUG == "ORACLE-BUG" and f"{Status.NO_GOLDEN}" == "NO-GOLDEN"
    assert set(_TRAITS) == set(Status)


def test_what_fails_a_run_and_what_fails_it_only_under_strict():
    assert [s for s in Status if s.fails_run()] == [
        Status.ERROR, Status.FAIL, Status.STALE, Status.NO_GOLDEN]
    assert [s for s in Status if s.fails_run(strict=True)] == list(Status)[:-1]


def test_printer_traits():
    assert {s: s.junit for s in Status} == {
        Status.ERROR: "error", Status.FAIL: "failure", Status.STALE: "error",
        Status.NO_GOLDEN: "error", Status.ORACLE_BUG: "skipped",
        Status.UNSUPPORTED: "skipped", Status.PASS: None}
    assert [s.mark for s in Status] == ["ERR", "FAIL", "stale", "none", "o-bug", "unsup", "ok"]
    assert Status.FAIL.style == "bold red" and Status.PASS.colour == "#2e9d4a"


def test_worst_takes_members_or_spellings():
    assert worst(["PASS", Status.ORACLE_BUG, "UNSUPPORTED"]) is Status.ORACLE_BUG
    assert worst([Status.PASS]) is Status.PASS


def test_a_result_holds_the_member_and_writes_the_spelling():
    fields = {"cell_id": "l1/x", "model": "x", "path": "l1", "batch": 1, "padding": "equal",
              "script": "static", "context": "short", "detail": "", "rerun": "",
              "seconds": 0.0, "tokens": 0}
    result = CellResult(status="ORACLE-BUG", **fields)
    assert result.status is Status.ORACLE_BUG
    assert json.loads(result.to_json())["status"] == "ORACLE-BUG"
    assert CellResult.from_json(result.to_json()).status is Status.ORACLE_BUG
    with pytest.raises(ValueError, match="'OK' is not a valid Status"):
        CellResult(status="OK", **fields)
