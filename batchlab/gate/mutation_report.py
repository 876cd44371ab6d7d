"""The committed report of a mutation campaign: README.md and results.json in one folder."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from batchlab.gate.mutation import Campaign


def write_report(out: Path, result: Campaign, diffs: dict[str, str],
                 verdicts: dict[str, str], note: str) -> list[str]:
    """Write the report; the survivors that have no verdict yet (the report says so)."""
    out.mkdir(parents=True, exist_ok=True)
    survivors = result.survivors
    unjudged = [o.name for o in survivors if o.name not in verdicts]
    per_file: dict[str, Counter] = {}
    for o in result.sampled:
        per_file.setdefault(o.file, Counter())[o.status] += 1
    lines = [
        "# Mutation testing of batchlab/engine",
        "",
        note,
        "",
        f"**Mutation score {result.score:.1f}%**: {result.tested} mutants judged by the "
        f"killers, of {len(result.sampled)} sampled from the {result.generated} mutmut "
        "generated. Counts: " + ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()))
        + ". The score is (killed + timeout + segfault) / judged.",
        "",
        "| file | sampled | killed | survived | other |",
        "| --- | --- | --- | --- | --- |",
    ]
    for file, c in sorted(per_file.items()):
        other = sum(n for s, n in c.items() if s not in ("killed", "survived"))
        lines.append(f"| {file} | {sum(c.values())} | {c['killed']} | {c['survived']} | {other} |")
    kinds = Counter(_kind(verdicts.get(o.name, "")) for o in survivors)
    killed = result.tested - len(survivors)
    if result.tested:
        judged = result.tested - kinds["equivalent"]
        lines += ["", (f"Judged survivors: {kinds['equivalent']} equivalent, {kinds['hole']} "
                       f"holes still open, {kinds['closed']} holes closed since by new unit "
                       f"tests. Killed or closed: {killed + kinds['closed']}/{result.tested} "
                       f"= {100 * (killed + kinds['closed']) / result.tested:.1f}%; "
                       f"excluding the equivalent mutants: "
                       f"{killed + kinds['closed']}/{judged} = "
                       f"{_percent(killed + kinds['closed'], judged)}.")]
    lines += ["", f"## Surviving mutants ({len(survivors)}: "
              + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")", ""]
    for o in survivors:
        lines += [f"### `{o.name}`", "", f"Verdict: {verdicts.get(o.name, 'NOT JUDGED YET')}",
                  "", "```diff", diffs.get(o.name, "").strip(), "```", ""]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({
        "score": round(result.score, 2), "tested": result.tested,
        "sampled": len(result.sampled), "generated": result.generated,
        "counts": dict(result.counts),
        "mutants": {o.name: {"file": o.file, "status": o.status,
                             "verdict": verdicts.get(o.name)} for o in result.sampled},
    }, indent=1, sort_keys=True) + "\n")
    return unjudged


def _percent(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"


def _kind(verdict: str) -> str:
    words = verdict.split(":", 1)[0].split()
    head = words[0].lower() if words else ""
    return head if head in ("equivalent", "hole", "closed") else "not judged"
