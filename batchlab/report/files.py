"""The report folder: results.jsonl is the source; CSV, Markdown and JUnit derive from it.

    results.jsonl   one CellResult per line, appended as cells finish
    results.csv     the same, flat (pandas-friendly)
    summary.md      the summary line, model x scenario table and failures
    junit.xml       one testcase per cell, so CI systems show the matrix natively
    heatmap.png     status per model x scenario
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from batchlab.cells.result import CellResult
from batchlab.report.table import status_table
from batchlab.status import Status

JSONL = "results.jsonl"
PARTIAL_MARK = "**Partial run**"  # summary.md of a run cut short


class ResultsLog:
    """Appends each result as it arrives; a cut-short run leaves every finished line."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._file = (self.folder / JSONL).open("w")

    def append(self, result: CellResult) -> None:
        self._file.write(result.to_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_results(folder: Path) -> list[CellResult]:
    results = []
    for line in (Path(folder) / JSONL).read_text().splitlines():
        if line.strip():
            try:
                results.append(CellResult.from_json(line))
            except (ValueError, TypeError):
                break  # a line cut by a crash mid-write: keep what is whole
    return results


def write_all(folder: Path, results: list[CellResult], summary: str, complete: bool) -> None:
    folder = Path(folder)
    write_csv(folder / "results.csv", results)
    write_markdown(folder / "summary.md", results, summary, complete)
    write_junit(folder / "junit.xml", results)
    from batchlab.report.heatmap import write_heatmap

    write_heatmap(folder / "heatmap.png", results)


def write_csv(path: Path, results: list[CellResult]) -> None:
    fields = [f.name for f in dataclasses.fields(CellResult) if f.name != "traceback"]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for r in results:
            row = {k: getattr(r, k) for k in fields}
            row["divergence"] = json.dumps(r.divergence) if r.divergence else ""
            writer.writerow(row)


def write_markdown(path: Path, results: list[CellResult], summary: str, complete: bool) -> None:
    lines = ["# batchlab matrix run", ""]
    if not complete:
        lines += [f"{PARTIAL_MARK}: interrupted; only finished cells are listed.", ""]
    lines += [f"**{summary}**", ""]
    models, scenarios, cells = status_table(results)
    lines.append("| model | " + " | ".join(scenarios) + " |")
    lines.append("|---" * (len(scenarios) + 1) + "|")
    for model in models:
        row = [cells.get((model, s), "") for s in scenarios]
        lines.append(f"| {model} | " + " | ".join(row) + " |")
    bad = [r for r in results if r.status != Status.PASS]
    if bad:
        lines += ["", "## Not passing", ""]
        for r in bad:
            lines.append(f"- `{r.cell_id}` **{r.status}**: {r.detail}  ")
            lines.append(f"  rerun: `{r.rerun}`")
    path.write_text("\n".join(lines) + "\n")


def write_junit(path: Path, results: list[CellResult]) -> None:
    tags = [r.status.junit for r in results]
    suite = (f'<testsuite name="batchlab" tests="{len(results)}" '
             f'failures="{tags.count("failure")}" errors="{tags.count("error")}" '
             f'skipped="{tags.count("skipped")}">')
    out = ['<?xml version="1.0" encoding="utf-8"?>', suite]
    for r, tag in zip(results, tags):
        head = (f'  <testcase classname={quoteattr(r.model)} name={quoteattr(r.cell_id)} '
                f'time="{r.seconds}"')
        if tag is None:
            out.append(head + "/>")
            continue
        body = escape((r.traceback or r.detail) + f"\nrerun: {r.rerun}")
        out.append(head + ">")
        out.append(f"    <{tag} message={quoteattr(r.status + ': ' + r.detail[:500])}>"
                   f"{body}</{tag}>")
        out.append("  </testcase>")
    out.append("</testsuite>")
    path.write_text("\n".join(out) + "\n")
