"""The runner and its report folder, end to end on a few quick cells (seconds)."""

import json
import xml.etree.ElementTree as ET

from batchlab.cli import main
from batchlab.report.files import read_results

QUICK = "matrices/quick.toml"


def run(tmp_path, *extra):
    report = tmp_path / "report"
    status = main(["matrix", "run", "--matrix", QUICK, "--filter", "l1/llama/",
                   "--report", str(report), "--jobs", "1", *extra])
    return status, report


def test_run_writes_every_report_file_and_exits_zero(tmp_path):
    status, report = run(tmp_path)
    assert status == 0
    for name in ("results.jsonl", "results.csv", "summary.md", "junit.xml", "heatmap.png"):
        assert (report / name).stat().st_size > 0, name
    results = read_results(report)
    assert len(results) == 6 and {r.status for r in results} == {"PASS"}
    suite = ET.parse(report / "junit.xml").getroot()
    assert suite.get("tests") == "6" and suite.get("failures") == "0"
    assert "6/6 cells passed (0 unsupported, 0 oracle-bug)" in (report / "summary.md").read_text()


def test_missing_goldens_fail_the_run_with_the_fix(tmp_path):
    status, report = run(tmp_path, "--goldens", str(tmp_path / "empty"))
    assert status == 1
    result = read_results(report)[0]
    assert result.status == "NO-GOLDEN"
    assert "batchlab golden regen --matrix matrices/quick.toml" in result.detail


def test_a_cut_short_log_keeps_its_whole_lines(tmp_path):
    _, report = run(tmp_path)
    log = report / "results.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])  # a crash mid-write
    assert [r.cell_id for r in read_results(report)] == [
        json.loads(line)["cell_id"] for line in lines[:3]]


def test_shards_partition_the_matrix(tmp_path):
    from batchlab.cells.select import parse_shard, select
    from batchlab.cells.spec import load_matrix

    cells = load_matrix(QUICK)
    parts = [select(cells, None, parse_shard(f"{i}/3")) for i in (1, 2, 3)]
    assert sorted(c.id for p in parts for c in p) == sorted(c.id for c in cells)
    assert not {c.id for c in parts[0]} & {c.id for c in parts[1]}


def test_a_run_on_a_log_says_what_it_does_in_80_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # rich reads it; capsys is not a terminal
    status, _ = run(tmp_path, "--goldens", str(tmp_path / "empty"))
    assert status == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("matrix: 6/6 cells, 6 failing so far (NO-GOLDEN 6), ")
               for line in lines)
    assert "0/6 cells passed (0 unsupported, 0 oracle-bug)" in lines
    reruns = [line for line in lines if line.startswith("    rerun: ")]
    assert reruns and all(line.endswith("'") for line in reruns)  # never broken
    # wider only for the long tmp path: details wrap between words, never inside one
    assert all(len(line) <= 80 for line in lines if str(tmp_path) not in line)
    assert all(len(line) <= 80 for line in lines[1:] if len(line.split()) > 1
               and line not in reruns)


def test_an_exact_id_selects_that_cell_alone_and_a_fragment_every_match():
    from batchlab.cells.select import select
    from batchlab.cells.spec import expand

    cells = expand({"sweep": [{"models": ["llama"], "batch": [2], "padding": ["ragged"],
                               "scripts": ["static"], "contexts": ["short"],
                               "sampling": [{}, {"temperature": 1.0, "seed": 1}]}]})
    ids = [c.id for c in cells]
    assert ids == ["l1/llama/B2/ragged/static/ctx-short",
                   "l1/llama/B2/ragged/static/ctx-short/t1_r1"]
    assert [c.id for c in select(cells, ids[0], None)] == ids[:1]
    assert [c.id for c in select(cells, "B2/ragged/static/ctx-short", None)] == ids
    assert [c.id for c in select(cells, f"{ids[0]}*", None)] == ids
