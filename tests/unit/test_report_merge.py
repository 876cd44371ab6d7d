"""Merging the report folders of a sharded run: one report, in matrix order, as one run."""

import xml.etree.ElementTree as ET

import pytest

from batchlab.cells.result import CellResult
from batchlab.cells.select import select
from batchlab.cells.spec import load_matrix
from batchlab.cli import main
from batchlab.report import merge
from batchlab.report.files import ResultsLog, read_results, write_all
from batchlab.status import Status

QUICK = "matrices/quick.toml"
LLAMA = [c.id for c in select(load_matrix(QUICK), "l1/llama/", None)]


def test_two_real_shards_merge_into_the_report_of_one_run(tmp_path, capsys):
    for i in (1, 2):
        assert main(["matrix", "run", "--matrix", QUICK, "--filter", "l1/llama/",
                     "--shard", f"{i}/2", "--report", str(tmp_path / f"shard-{i}"),
                     "--jobs", "1"]) == 0
    out = tmp_path / "merged"
    status = main(["report", "merge", str(tmp_path / "shard-2"), str(tmp_path / "shard-1"),
                   "--out", str(out), "--matrix", QUICK, "--filter", "l1/llama/"])
    assert status == 0
    assert [(r.cell_id, r.status) for r in read_results(out)] == [(i, "PASS") for i in LLAMA]
    suite = ET.parse(out / "junit.xml").getroot()
    assert [suite.get(k) for k in ("tests", "failures", "errors")] == ["6", "0", "0"]
    assert [t.get("name") for t in suite] == LLAMA
    assert "**6/6 cells passed (0 unsupported, 0 oracle-bug)**" in (out / "summary.md").read_text()
    assert "6/6 cells passed" in capsys.readouterr().out


def shard(folder, ids, status=Status.PASS, complete=True):
    results = [CellResult(cell_id=i, model="llama", path="l1", batch=1, padding="ragged",
                          script="static", context="short", status=status, detail="d",
                          rerun="r", seconds=0.1, tokens=1) for i in ids]
    log = ResultsLog(folder)
    for r in results:
        log.append(r)
    log.close()
    write_all(folder, results, "s", complete)
    return folder


def test_a_cell_in_two_shards_is_refused(tmp_path):
    a = shard(tmp_path / "a", LLAMA[:2])
    b = shard(tmp_path / "b", LLAMA[1:3])
    with pytest.raises(ValueError, match=f"cell {LLAMA[1]} is in both"):
        merge.merge_results([a, b], LLAMA)


def test_missing_cells_and_a_cut_short_shard_make_it_partial(tmp_path):
    a = shard(tmp_path / "a", LLAMA[:2])
    b = shard(tmp_path / "b", LLAMA[2:4], status=Status.ORACLE_BUG, complete=False)
    results, missing = merge.merge_results([b, a], LLAMA)
    assert [r.cell_id for r in results] == LLAMA[:4] and missing == LLAMA[4:]
    assert [merge.shard_was_cut_short(f) for f in (a, b)] == [False, True]
    out = tmp_path / "out"
    assert main(["report", "merge", str(a), str(b), "--out", str(out), "--matrix", QUICK,
                 "--filter", "l1/llama/"]) == 1
    assert "**Partial run**" in (out / "summary.md").read_text()


def test_strays_from_another_matrix_are_refused(tmp_path):
    a = shard(tmp_path / "a", ["l1/nowhere"])
    with pytest.raises(ValueError, match="not cells of the matrix"):
        merge.merge_results([a], LLAMA)
