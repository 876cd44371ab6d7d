"""``batchlab gate``: how strong is the gate? (docs/coverage.md, docs/mutation.md)

    batchlab gate coverage [--matrix F] [--filter P] [--threshold 98] [--report DIR]
        branch coverage of batchlab/engine under the matrix's cells alone; exits 1 below
        the threshold, or when a cell is not sound (FAIL, ERROR, STALE, NO-GOLDEN)
    batchlab gate mutation-sample --campaign DIR [--every N]
        a deterministic sample of the mutants mutmut generated in DIR
    batchlab gate mutation-report --campaign DIR --sample F --verdicts F --out DIR
        the committed report of a mutmut campaign (score, counts, every survivor's diff)
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from batchlab.display import shown
from batchlab.gate.coverage import (
    DEFAULT_THRESHOLD,
    PROJECT_ROOT,
    REASONS,
    EngineCoverage,
    measure,
    verdict,
)

DEFAULT_REPORT = PROJECT_ROOT / "reports" / "coverage"


def add_gate_parser(sub) -> None:
    gate = sub.add_parser("gate", help="measure the gate's own strength (coverage, mutation)",
                          description=__doc__,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = gate.add_subparsers(dest="gate_command", required=True)
    cov = actions.add_parser("coverage", help="branch coverage of batchlab/engine under a matrix")
    cov.add_argument("--matrix", type=Path, default=PROJECT_ROOT / "matrices" / "default.toml",
                     help="TOML matrix (default: matrices/default.toml)")
    cov.add_argument("--filter", default=None,
                     help="cell ids containing this text, or a glob (* ? []); comma = or")
    cov.add_argument("--goldens", type=Path, default=PROJECT_ROOT / "goldens",
                     help="golden folder (default: goldens/)")
    cov.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                     help=f"minimum percent of branches (default {DEFAULT_THRESHOLD:g})")
    cov.add_argument("--report", type=Path, default=DEFAULT_REPORT,
                     help="folder for engine.md and engine.json (default: reports/coverage)")
    cov.set_defaults(func=coverage_command)

    add_mutation_parsers(actions)


def coverage_command(args, console) -> int:
    start = time.perf_counter()
    with console.status(f"running the cells of {shown(args.matrix)} under coverage"):
        result = measure(args.matrix, args.goldens, args.filter)
    passed, why = verdict(result, args.threshold)
    args.report.mkdir(parents=True, exist_ok=True)
    (args.report / "engine.json").write_text(json.dumps(result.as_dict(), indent=1) + "\n")
    (args.report / "engine.md").write_text(markdown(result, args.threshold, passed, why))
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(result.statuses.items()))
    console.print(f"{result.num_cells} cells of {shown(args.matrix)}"
                  + (f" matching {args.filter!r}" if args.filter else "") + f": {statuses}",
                  highlight=False, soft_wrap=True)
    for f in result.files:
        console.print(f"  {f.file:<34} branches {f.covered_branches:>3}/{f.num_branches:<3} "
                      f"lines {f.covered_statements:>3}/{f.num_statements}",
                      highlight=False, soft_wrap=True)
    tags = ", ".join(f"{n} {t}" for t, n in sorted(
        Counter(e.tag for e in result.exclusions).items()))
    console.print(f"not counted ({len(result.exclusions)} marked lines, each listed in "
                  f"{shown(args.report / 'engine.md')}): {tags}", highlight=False, soft_wrap=True)
    console.print(f"uncovered ({len(result.misses)}):", highlight=False, soft_wrap=True)
    for miss in result.misses:
        console.print(f"  {miss.describe()}", highlight=False, markup=False, soft_wrap=True)
    mark = "[green]gate OK[/]" if passed else "[bold red]gate FAILED[/]"
    console.print(f"[bold]{result.summary()}[/]: {mark}, {why}", highlight=False, soft_wrap=True)
    console.print(f"wall time {time.perf_counter() - start:.1f} s; report: "
                  f"{shown(args.report / 'engine.md')}", highlight=False, soft_wrap=True)
    return 0 if passed else 1


def markdown(result: EngineCoverage, threshold: float, passed: bool, why: str) -> str:
    command = "batchlab gate coverage" + (f" --filter '{result.pattern}'" if result.pattern else "")
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(result.statuses.items()))
    lines = [
        "# Branch coverage of batchlab/engine under the matrix",
        "",
        (f"`{command}` (matrix `{shown(Path(result.matrix))}`, {result.num_cells} cells: "
         f"{statuses}). Only the matrix's cells run; the unit tests do not count. What each "
         "miss means: docs/coverage.md."),
        "",
        (f"**{result.branch_percent:.2f}% of branches** ({result.covered_branches}/"
         f"{result.num_branches}), {result.covered_statements}/{result.num_statements} "
         f"lines: {'PASS' if passed else 'FAIL'}, {why}. With no marked line left out "
         f"(below): {result.unmarked_percent:.2f}% ({result.unmarked[0]}/"
         f"{result.unmarked[1]})."),
        "",
        "| file | branches | lines |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {f.file} | {f.covered_branches}/{f.num_branches} | "
              f"{f.covered_statements}/{f.num_statements} |" for f in result.files]
    lines += ["", f"## Uncovered ({len(result.misses)})", ""]
    lines += ["| where | function | what | source |", "| --- | --- | --- | --- |"]
    lines += [f"| {m.where} | {m.function or '(module)'} | "
              + ("line never runs" if m.target is None else
                 f"branch to {'exit' if m.target < 0 else m.target} never taken")
              + f" | `{m.source.replace('|', '¦')}` |" for m in result.misses]
    lines += ["", f"## Not counted ({len(result.exclusions)} marked lines)", "",
              "`# not gated: TAG` leaves a line (with its block) out of the count; "
              "`# one way: TAG` leaves out the branch the schedule never takes.", ""]
    for tag in sorted({e.tag for e in result.exclusions}):
        marked = [e for e in result.exclusions if e.tag == tag]
        lines += [f"**{tag}** ({len(marked)}): {REASONS[tag]}.", ""]
        lines += [f"- {e.file}:{e.line} ({e.kind}): `{e.source.replace('|', '¦')}`"
                  for e in marked]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def add_mutation_parsers(actions) -> None:
    s = actions.add_parser("mutation-sample", help="print a deterministic sample of mutants")
    s.add_argument("--campaign", type=Path, required=True,
                   help="the folder mutmut ran in (it holds mutants/)")
    s.add_argument("--every", type=int, default=10, help="every n-th mutant of each file")
    s.set_defaults(func=sample_command)
    r = actions.add_parser("mutation-report", help="write the report of a mutmut campaign")
    r.add_argument("--campaign", type=Path, required=True,
                   help="the folder mutmut ran in (it holds mutants/)")
    r.add_argument("--sample", type=Path, required=True,
                   help="the sampled mutant names, one a line (mutation-sample's output)")
    r.add_argument("--verdicts", type=Path, required=True,
                   help="TOML [verdicts] name = 'equivalent: ...' | 'hole: ...'")
    r.add_argument("--out", type=Path, required=True, help="report folder")
    r.add_argument("--note", default="", help="a paragraph on how the campaign was run")
    r.set_defaults(func=report_command)


def sample_command(args, console) -> int:
    from batchlab.gate.mutation import sample

    for name in sample(args.campaign, args.every):
        print(name)
    return 0


def report_command(args, console) -> int:
    from batchlab.gate.mutation import campaign, diff, load_verdicts
    from batchlab.gate.mutation_report import write_report

    names = [n for n in args.sample.read_text().split() if n]
    result = campaign(args.campaign, names)
    verdicts = load_verdicts(args.verdicts)
    diffs = {o.name: diff(args.campaign, o.name) for o in result.survivors}
    unjudged = write_report(args.out, result, diffs, verdicts, args.note)
    console.print(f"mutation score {result.score:.1f}% ({result.tested} tested of "
                  f"{len(result.sampled)} sampled, {result.generated} generated): "
                  + ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items())),
                  highlight=False)
    if unjudged:
        console.print(f"[bold red]{len(unjudged)} survivors have no verdict[/] in "
                      f"{args.verdicts}: {', '.join(unjudged)}", highlight=False)
        return 1
    return 0
