"""The statuses a cell can end in, and everything every printer needs to know about them.

A status is a ``str`` (``Status.PASS == "PASS"``), so results.jsonl, CSV and reports keep
their spelling. Members are declared most severe first: a group of cells shows its worst.

    PASS         bit-exact with the golden (or inside a lab path's KL gate)
    FAIL         the first divergence from the golden; the engine is wrong
    ERROR        a crash: the oracle, the engine or the worker process running the cell
    STALE        the golden was made from other versions, weights or cell definition
    NO-GOLDEN    there is no golden for the cell on this backend
    ORACLE-BUG   the oracle disagrees with itself and the engine equals its batch bits
    UNSUPPORTED  the engine lacks a feature the cell needs: not a failure

Adding a status is one member and one row of ``_TRAITS``; ``tests/unit/test_status.py``
fails until both exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    ERROR = "ERROR"
    FAIL = "FAIL"
    STALE = "STALE"
    NO_GOLDEN = "NO-GOLDEN"
    ORACLE_BUG = "ORACLE-BUG"
    UNSUPPORTED = "UNSUPPORTED"
    PASS = "PASS"

    @property
    def severity(self) -> int:
        """0 for the most severe (ERROR); PASS is the largest."""
        return _ORDER.index(self)

    def fails_run(self, strict: bool = False) -> bool:
        """Does one cell with this status make ``batchlab matrix run`` exit 1?"""
        traits = _TRAITS[self]
        return traits.fails or (strict and traits.fails_strict)

    @property
    def mark(self) -> str:
        """Short text for grid cells (summary.md)."""
        return _TRAITS[self].mark

    @property
    def style(self) -> str:
        """rich style for the console."""
        return _TRAITS[self].style

    @property
    def colour(self) -> str:
        """Hex colour for the heatmap."""
        return _TRAITS[self].colour

    @property
    def junit(self) -> str | None:
        """The JUnit child element of the testcase; None: a plain passing testcase."""
        return _TRAITS[self].junit


@dataclass(frozen=True, slots=True, kw_only=True)
class _Traits:
    fails: bool
    fails_strict: bool  # fails only under --strict
    mark: str
    style: str
    colour: str
    junit: str | None


_TRAITS: dict[Status, _Traits] = {
    Status.ERROR: _Traits(fails=True, fails_strict=True, mark="ERR", style="bold magenta",
                          colour="#7b1fa2", junit="error"),
    Status.FAIL: _Traits(fails=True, fails_strict=True, mark="FAIL", style="bold red",
                         colour="#d62728", junit="failure"),
    Status.STALE: _Traits(fails=True, fails_strict=True, mark="stale", style="yellow",
                          colour="#ff9800", junit="error"),
    Status.NO_GOLDEN: _Traits(fails=True, fails_strict=True, mark="none", style="yellow",
                              colour="#9e9e9e", junit="error"),
    Status.ORACLE_BUG: _Traits(fails=False, fails_strict=True, mark="o-bug", style="cyan",
                               colour="#1f77b4", junit="skipped"),
    Status.UNSUPPORTED: _Traits(fails=False, fails_strict=True, mark="unsup", style="dim",
                                colour="#e0e0e0", junit="skipped"),
    Status.PASS: _Traits(fails=False, fails_strict=False, mark="ok", style="green",
                         colour="#2e9d4a", junit=None),
}
_ORDER = tuple(Status)


def worst(statuses) -> Status:
    """The most severe of ``statuses`` (Status members or their spellings)."""
    return min((Status(s) for s in statuses), key=lambda s: s.severity)
