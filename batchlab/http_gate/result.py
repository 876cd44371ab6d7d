"""A check's outcome, and its printers: the console table, JSON and JUnit.

Statuses are the matrix's (``batchlab.status``): PASS, FAIL (the server is wrong:
``difference`` is the first place, e.g. ``case X, step 3: token 17, golden 42``), ERROR
(no usable answer, or a golden that cannot be trusted). A server without logprobs is
checked on its tokens, and ``compared`` says so.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from xml.sax.saxutils import escape, quoteattr

from batchlab.status import Status


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    check: str  # alone, needle, consistency
    status: Status
    compared: str  # what was compared, with counts
    difference: str = ""  # the first difference (FAIL), the error (ERROR), the reason

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "status": str(self.status)})


def exit_code(results: list[CheckResult]) -> int:
    return int(any(r.status.fails_run() for r in results))


def junit(results: list[CheckResult], server: str) -> str:
    failures = sum(r.status.junit == "failure" for r in results)
    errors = sum(r.status.junit == "error" for r in results)
    cases = []
    for r in results:
        body = ""
        if r.status.junit:
            body = (f"<{r.status.junit} message={quoteattr(r.difference[:500])}>"
                    f"{escape(r.compared)}\n{escape(r.difference)}</{r.status.junit}>")
        cases.append(f'  <testcase classname={quoteattr("http." + server)} '
                     f"name={quoteattr(r.check)}>{body}</testcase>")
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="batchlab http check" '
            f'tests="{len(results)}" failures="{failures}" errors="{errors}">\n'
            + "\n".join(cases) + "\n</testsuite>\n")


def print_results(console, results: list[CheckResult]) -> None:
    from rich.table import Table

    table = Table(show_lines=True)
    for column in ("check", "status", "compared", "first difference"):
        table.add_column(column, overflow="fold")
    for r in results:
        table.add_row(r.check, f"[{r.status.style}]{r.status}[/]", r.compared, r.difference)
    console.print(table)
