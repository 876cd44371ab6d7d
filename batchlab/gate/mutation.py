"""Mutation testing of ``batchlab/engine`` with mutmut 3: the sample and the report.

mutmut writes its mutants and their outcomes under ``<campaign>/mutants/`` (one
``<file>.meta`` JSON per source file: ``exit_code_by_key`` maps a mutant's name to the
exit code of its killers, None when not run yet). This module picks a deterministic
sample of those names (every n-th mutant of each file, so every file is sampled in
proportion) and turns a finished campaign into the committed report: the score, the
counts, and every surviving mutant as a diff with a verdict written by a person in a
verdicts TOML (``name = "equivalent: why"`` or ``"hole: the cell/test that kills it"``).

How to run a campaign: docs/mutation.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ENGINE_META = Path("batchlab") / "engine"
KILLED = frozenset({"killed", "timeout", "segfault"})  # the killers noticed the mutant
# mutmut 3's own reading of a worker's exit code (mutmut/stats.py), for the statuses a
# report can meet; anything else is "suspicious", as mutmut says.
STATUS_BY_EXIT_CODE = {
    1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
    35: "suspicious", 36: "timeout", 37: "caught by type check", None: "not checked",
    -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", -11: "segfault",
    -9: "segfault", 2: "interrupted",
}


def status_of(exit_code: int | None) -> str:
    return STATUS_BY_EXIT_CODE.get(exit_code, "suspicious")


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    name: str  # mutmut's, e.g. batchlab.engine.caches.kv.xǁBatchKVǁfilter__mutmut_3
    file: str  # batchlab/engine/caches/kv.py
    status: str


def outcomes(campaign: Path) -> dict[str, Outcome]:
    """Every engine mutant mutmut generated in ``campaign``, run or not."""
    found = {}
    # the engine is in rooms (core/, caches/, kernels/, paths/...): every folder's metas
    for meta in sorted((campaign / "mutants" / ENGINE_META).rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        file = str(meta.relative_to(campaign / "mutants")).removesuffix(".meta")
        for name, code in codes.items():
            found[name] = Outcome(name=name, file=file, status=status_of(code))
    if not found:
        raise ValueError(f"no mutmut results under {campaign / 'mutants'}; run `mutmut run` "
                         "there first (docs/mutation.md)")
    return found


def sample(campaign: Path, every: int) -> list[str]:
    """Every ``every``-th mutant of each engine file, in name order (a function's mutants
    by their number), starting at the first: deterministic for one engine source and one
    mutmut version."""
    if every < 1:
        raise ValueError("--every must be >= 1")
    by_file: dict[str, list[str]] = {}
    for o in outcomes(campaign).values():
        by_file.setdefault(o.file, []).append(o.name)
    return [name for file in sorted(by_file)
            for name in sorted(by_file[file], key=_numbered)[::every]]


def _numbered(name: str) -> tuple[str, int]:
    """``f__mutmut_10`` after ``f__mutmut_9``."""
    stem, _, number = name.rpartition("_")
    return (stem, int(number)) if number.isdigit() else (name, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Campaign:
    sampled: tuple[Outcome, ...]
    generated: int

    @property
    def counts(self) -> Counter:
        return Counter(o.status for o in self.sampled)

    @property
    def tested(self) -> int:
        """Mutants the killers judged (not 'not checked', 'no tests' or 'interrupted')."""
        return sum(n for s, n in self.counts.items() if s in KILLED or s == "survived")

    @property
    def score(self) -> float:
        killed = sum(n for s, n in self.counts.items() if s in KILLED)
        return 100.0 * killed / self.tested if self.tested else 0.0

    @property
    def survivors(self) -> list[Outcome]:
        return [o for o in self.sampled if o.status == "survived"]


def campaign(campaign_dir: Path, names: list[str]) -> Campaign:
    every = outcomes(campaign_dir)
    missing = [n for n in names if n not in every]
    if missing:
        raise ValueError(f"{len(missing)} sampled mutants are not in {campaign_dir}: "
                         f"{missing[:3]}; was the sample made from another engine source?")
    return Campaign(sampled=tuple(every[n] for n in names), generated=len(every))


def diff(campaign_dir: Path, name: str) -> str:
    """mutmut's own diff of one mutant (``mutmut show``), without its status line."""
    shown = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=campaign_dir,
                           capture_output=True, text=True, check=True).stdout
    return "\n".join(line for line in shown.splitlines() if not line.startswith("# "))


def load_verdicts(path: Path) -> dict[str, str]:
    import tomllib

    return tomllib.loads(path.read_text())["verdicts"] if path.exists() else {}
