"""The report of a campaign run by gate/mutation_run.py: scores, counts, every survivor judged.

Input: the plan (the sample), the runner's JSONL (one line per matrix job and per unit
job), the survivors' diffs (``mutmut show``, collected where mutmut is installed) and a
verdicts TOML written by a person: ``"<mutant>" = "equivalent: why no input can tell"``,
``"hole: ..."`` (open), or ``"closed: the cell / test that kills it now"``.

Figures:

- **matrix score** = killed by the default matrix / (finished - equivalent): the headline
  (issue 26 item 6 asks for >= 90%). ``killed`` counts kills, timeouts and crashes (the
  gate fails on each); ``finished`` is every sampled mutant whose matrix job ended
  (killed, survived, no cells, capped). A capped mutant (its killers outran the budget)
  counts as not killed: the figure is a lower bound where capped mutants are not all
  equivalent.
- **matrix + unit score**: the same with the unit tests' kills added.
- Both with a 95% Wilson interval over the sample.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import tomllib

from batchlab.gate.mutation_plan import wilson

KILLS = frozenset({"killed", "timeout", "segfault", "error"})
NOT_KILLED = frozenset({"survived", "no cells", "capped"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Mutant:
    name: str
    file: str
    matrix: str  # the matrix job's status, or "not run"
    unit: str  # the unit job's status, "killed by matrix", or "not run"
    detail: dict

    @property
    def finished(self) -> bool:
        return self.matrix in KILLS or self.matrix in NOT_KILLED

    @property
    def matrix_killed(self) -> bool:
        return self.matrix in KILLS

    @property
    def unit_killed(self) -> bool:
        return self.unit in ("killed", "timeout", "segfault")


def read(plan: dict, results: list[dict]) -> list[Mutant]:
    matrix = {r["name"]: r for r in results if r["kind"] == "matrix"}
    unit = {r["name"]: r for r in results if r["kind"] == "unit"}
    found = []
    for m in plan["mutants"]:
        mj = matrix.get(m["name"], {"status": "not run"})
        status = mj["status"]
        u = "killed by matrix" if status in KILLS else unit.get(m["name"], {}).get(
            "status", "not run")
        found.append(Mutant(name=m["name"], file=m["file"], matrix=status, unit=u, detail=mj))
    return found


def kind(verdict: str | None) -> str:
    """The verdict's first word: ``hole (capped ...): why`` is a hole."""
    words = (verdict or "").split(":", 1)[0].split()
    head = words[0].lower() if words else ""
    return head if head in ("equivalent", "hole", "closed") else "not judged"


def figures(mutants: list[Mutant], verdicts: dict[str, str]) -> dict:
    done = [m for m in mutants if m.finished]
    equivalent = [m for m in done if not m.matrix_killed and kind(verdicts.get(m.name)) ==
                  "equivalent"]
    judged = len(done) - len(equivalent)
    killed = sum(m.matrix_killed for m in done)
    with_unit = killed + sum(1 for m in done if not m.matrix_killed and m.unit_killed
                             and m not in equivalent)
    closed = sum(1 for m in done if not m.matrix_killed and m not in equivalent
                 and kind(verdicts.get(m.name)) == "closed")
    survivors = [m for m in done if not m.matrix_killed]
    return {
        "sampled": len(mutants), "finished": len(done), "killed": killed,
        "survived": len(survivors), "equivalent": len(equivalent), "non_equivalent": judged,
        "matrix_score": _pct(killed, judged), "matrix_interval": _interval(killed, judged),
        "matrix_unit_score": _pct(with_unit, judged),
        "matrix_unit_interval": _interval(with_unit, judged),
        "raw_matrix_score": _pct(killed, len(done)),
        "holes_closed": closed,
        "matrix_status": dict(Counter(m.matrix for m in mutants)),
        "unit_status": dict(Counter(m.unit for m in survivors)),
        "verdicts": dict(Counter(kind(verdicts.get(m.name)) for m in survivors)),
    }


def _pct(a: int, b: int) -> float | None:
    return round(100.0 * a / b, 1) if b else None


def _interval(a: int, b: int) -> list[float]:
    low, high = wilson(a, b)
    return [round(100 * low, 1), round(100 * high, 1)]


def load_verdicts(path: Path) -> dict[str, str]:
    return tomllib.loads(path.read_text()).get("verdicts", {}) if path.exists() else {}


def write(out: Path, plan: dict, mutants: list[Mutant], verdicts: dict[str, str],
          diffs: dict[str, str], note: str) -> list[str]:
    """README.md and results.json in ``out``; the survivors with no verdict yet."""
    f = figures(mutants, verdicts)
    survivors = [m for m in mutants if m.finished and not m.matrix_killed]
    unjudged = [m.name for m in survivors if kind(verdicts.get(m.name)) == "not judged"]
    per_file: dict[str, Counter] = {}
    for m in mutants:
        c = per_file.setdefault(m.file, Counter())
        c["sampled"] += 1
        c["killed"] += m.matrix_killed
        c["survived"] += m.finished and not m.matrix_killed
        c["equivalent"] += kind(verdicts.get(m.name)) == "equivalent" and not m.matrix_killed
    lines = [
        "# Mutation testing of batchlab/engine", "", note, "",
        f"**Matrix score {f['matrix_score']}%** (95% interval {f['matrix_interval'][0]}-"
        f"{f['matrix_interval'][1]}%): {f['killed']} of the {f['non_equivalent']} "
        f"non-equivalent mutants killed by the default matrix alone. "
        f"**Matrix + unit tests: {f['matrix_unit_score']}%** "
        f"({f['matrix_unit_interval'][0]}-{f['matrix_unit_interval'][1]}%). "
        f"Raw (equivalent mutants counted as survivors): {f['raw_matrix_score']}%.", "",
        f"Sample: {f['sampled']} of {plan['generated']} mutants, uniform (seed "
        f"{plan['seed']}); {f['finished']} finished. Matrix jobs: "
        + ", ".join(f"{n} {s}" for s, n in sorted(f["matrix_status"].items()))
        + ". Survivors of the matrix: " + ", ".join(
            f"{n} {s}" for s, n in sorted(f["verdicts"].items()))
        + "; their unit jobs: " + ", ".join(
            f"{n} {s}" for s, n in sorted(f["unit_status"].items())) + ".", "",
        "| file | sampled | killed | survived | of which equivalent |",
        "| --- | --- | --- | --- | --- |",
    ]
    for file, c in sorted(per_file.items()):
        lines.append(f"| {file} | {c['sampled']} | {c['killed']} | {c['survived']} | "
                     f"{c['equivalent']} |")
    lines += ["", f"## The {len(survivors)} survivors of the matrix, each judged", ""]
    for m in sorted(survivors, key=lambda m: (kind(verdicts.get(m.name)), m.name)):
        ran = m.detail.get("cells_run", 0)
        of = m.detail.get("cells", 0)
        lines += [f"### `{m.name}`", "",
                  f"Matrix: {m.matrix} ({ran} of {of} killer cells run); unit tests: "
                  f"{m.unit}.", "", f"Verdict: {verdicts.get(m.name, 'NOT JUDGED YET')}", "",
                  "```diff", diffs.get(m.name, "(no diff)").strip(), "```", ""]
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({
        "figures": f, "generated": plan["generated"], "seed": plan["seed"],
        "mutants": {m.name: {"file": m.file, "matrix": m.matrix, "unit": m.unit,
                             "by": m.detail.get("by"), "cells_run": m.detail.get("cells_run"),
                             "cells": m.detail.get("cells"),
                             "verdict": verdicts.get(m.name)} for m in mutants},
    }, indent=1, sort_keys=True) + "\n")
    return unjudged
