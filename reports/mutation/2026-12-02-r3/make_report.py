"""Rewrite README.md and results.json of this campaign from its committed inputs:
plan.json, runner.jsonl (the device's results), verdicts.toml and diffs.json, then append
the re-check of round 2's survivors (plan-r2.json, extra.jsonl).
Run from the project root: python reports/mutation/2026-12-02-r3/make_report.py"""

import json
from collections import Counter
from pathlib import Path

from batchlab.gate.mutation_results import load_verdicts, read, write

D = Path(__file__).parent
NOTE = (Path(D / "note.md").read_text().strip())

plan = json.loads((D / "plan.json").read_text())
results = [json.loads(line) for line in (D / "runner.jsonl").read_text().splitlines()]
# the unit jobs the device could not run (pytest exit 4: tests/serve's conftest imports
# packages the device lacks), re-run on the shared machine; a later line wins in read()
rerun = D / "unit-rerun.jsonl"
if rerun.exists():
    results += [json.loads(line) for line in rerun.read_text().splitlines()]
diffs = json.loads((D / "diffs.json").read_text())
verdicts = load_verdicts(D / "verdicts.toml")
left = write(D, plan, read(plan, results), verdicts, diffs, NOTE)
print("survivors without a verdict:", len(left))
for name in left:
    print("  ", name)

# round 2's survivors, re-run on today's matrix (not in the score: another sample)
extra_path = D / "extra.jsonl"
if extra_path.exists():
    r2map = json.loads((D / "r2-names.json").read_text())  # r2 name -> today's name
    back = {new: old for old, new in r2map.items()}
    extra = [json.loads(line) for line in extra_path.read_text().splitlines()]
    extra = [r for r in extra if r["kind"] == "matrix"]
    counts = Counter(r["status"] for r in extra)
    lines = ["", "## Round 2's survivors on today's matrix", "",
             f"The {len(extra)} survivors of round 2 (reports/mutation/2026-12-01-r2) whose "
             "mutant has an identical diff today and that this sample did not draw again, "
             "run against today's default matrix (CAP2 s of cells each). Not in the score "
             "(another sample). " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
             + ".", "", "| round 2 mutant | today | by |", "| --- | --- | --- |"]
    for r in sorted(extra, key=lambda r: (r["status"], r["name"])):
        lines.append(f"| `{back.get(r['name'], r['name'])}` | {r['status']} | "
                     f"{r.get('by') or ''} |")
    with (D / "README.md").open("a") as sink:
        sink.write("\n".join(lines) + "\n")
