"""Write this folder's README from the plan, the device's results and rounds 3-5.

    python reports/mutation/2026-12-02-r6/make_report.py

Round 3's sample (450, seed 2612; 421 not equivalent) stands. A mutant whose code was
removed (round 5's dead code; this round's paged copy-on-write and ``written`` flag) no
longer exists and leaves the sample, killed or not (``lost.json``); the other lost ones
sit in functions other branches rewrote (killed in round 3, kept as killed, as rounds 4
and 5 kept them). Two holes are equivalent since this round's arguments (``EQUIVALENT``,
closed-r6.md). Round 3's non-equivalent survivors that still exist ran again on the
device's CPU (``results.jsonl``), with two mutations re-located on rewritten lines; the
GPU-class ones did not (no CPU cell can kill them): the figure with the CUDA slice adds
round 4's CUDA kills of those whose diff is unchanged.
"""

import collections
import json
import tomllib
from pathlib import Path

from batchlab.gate.mutation_plan import wilson

HERE = Path(__file__).parent
R3, R4 = HERE.parent / "2026-12-02-r3", HERE.parent / "2026-12-02-r4"
SAMPLE_NON_EQUIVALENT, R3_KILLED = 421, 308
# killed by round 4's cells, its function rewritten since (the row-cost fix): round 4's kill
R4_KILLED_REWRITTEN = ("batchlab.engine.core.cost.xǁRowCostǁrow_bytes__mutmut_3",)
# killed in round 3, its code removed in this round (Appended.copies): leaves the sample
R6_REMOVED_KILLED = ("batchlab.engine.paths.paged.block_manager.xǁBlockManagerǁappend__mutmut_3",)
# holes of round 3 shown equivalent in this round (closed-r6.md: every input, every backend)
EQUIVALENT = {
    "batchlab.engine.caches.window.xǁWindowKVǁmake_mask__mutmut_17":
        "equivalent (round 6): the branch runs only where drops_all_true_decode_mask() "
        "(the CPU backend), where the all-True mask it builds instead of None gives equal "
        "bits (SDPA's where(mask, scores, min)), or is not read at all (RowWindowKV: row "
        "attention takes first_keys); elsewhere both take the mask",
    "batchlab.engine.caches.rowints.xǁRowIntsǁ__init____mutmut_7":
        "equivalent (round 6): every RowInts is set() (or copy() overwrites _pending) "
        "before anything reads it: BatchKV/LeftPaddedKV.__init__ and BatchState.__init__ "
        "assign both vectors right after making them; no other construction site",
}


def short(name: str) -> str:
    return name.removeprefix("batchlab.engine.")


def main() -> None:
    verdicts = tomllib.loads((R3 / "verdicts.toml").read_text())["verdicts"]
    holes = {n for n, v in verdicts.items() if not v.startswith("equivalent")}
    plan = json.loads((HERE / "plan-r6.json").read_text())
    round3 = plan["round3_names"]
    lost = json.loads((HERE / "lost.json").read_text())
    removed = sorted(n for n in lost if n in holes and n not in R4_KILLED_REWRITTEN)
    rewritten = sorted(n for n in lost if n not in removed and n not in R6_REMOVED_KILLED)
    located = json.loads((HERE / "located.json").read_text())
    gpu_names = set((HERE / "gpu-names.txt").read_text().split())
    r4_gpu = {r["name"]: r for r in map(json.loads, (R4 / "gpu-results.jsonl").read_text().splitlines())}

    def r4_cuda(name: str) -> str:  # round 4's name is today's or round 3's
        r3 = next((k for k, v in located.items() if v == name), name)
        return (r4_gpu.get(name) or r4_gpu.get(r3) or {}).get("status", "?")

    def r3_name(name: str) -> str:
        return round3.get(name) or next((k for k, v in located.items() if v == name), name)

    gpu_killed = [n for n in gpu_names if r4_cuda(n) == "killed"]
    rows = [json.loads(line) for line in (HERE / "results.jsonl").read_text().splitlines()]
    extra = HERE / "rerun.jsonl"  # jobs run again on the shared machine, if any
    if extra.exists():
        rows += [json.loads(line) for line in extra.read_text().splitlines()]
    matrix = {r["name"]: r for r in rows if r["kind"] == "matrix"}
    unit = {r["name"]: r for r in rows if r["kind"] == "unit"}
    equivalent_now = {n for n in matrix if r3_name(n) in EQUIVALENT}
    # a re-located mutant that round 3 killed is already in R3_KILLED: not counted again
    counted = {n: r for n, r in matrix.items() if r3_name(n) in holes and n not in equivalent_now}
    cpu_killed = [n for n, r in counted.items() if r["status"] == "killed"]
    counts = collections.Counter(r["status"] for r in counted.values())
    n = SAMPLE_NON_EQUIVALENT - len(removed) - len(R6_REMOVED_KILLED) - len(EQUIVALENT)
    cpu_score = R3_KILLED - len(R6_REMOVED_KILLED) + len(R4_KILLED_REWRITTEN) + len(cpu_killed)
    with_gpu = cpu_score + len(gpu_killed)
    not_run = [m["name"] for m in plan["mutants"] if m["name"] not in matrix]

    def score(k: int, total: int = n) -> str:
        lo, hi = wilson(k, total)
        return f"{k / total:.1%} (95% interval {lo:.1%}-{hi:.1%}; {k} of {total})"

    def why(name: str) -> str:
        r3 = r3_name(name)
        text = EQUIVALENT.get(r3) or verdicts.get(r3, "killed in round 3")
        return text if len(text) < 200 else text[:197] + "..."

    def res(name: str) -> str:
        r = matrix[name]
        text = r["status"] + (" (fresh interpreter)" if r.get("fresh") else "")
        if r["status"] == "killed":
            text += f" by {r['by']} ({r['got']}, clean {r['expected']}; {r['cells_run']} of {r['cells']} cells)"
        elif r["status"] in ("survived", "capped"):
            text += f" ({r.get('cells_run', 0)} of {r.get('cells', 0)} cells)"
        u = unit.get(name)
        return text + (f"; unit: {u['status']}" if u else "")

    left = sorted(n for n, r in counted.items() if r["status"] != "killed")
    out = [
        "# Mutation testing of batchlab/engine, round 6: round 3's sample on the mut6 branch",
        "",
        "Issue 26 item 6. Round 3's sample (450 of 5151 mutants, seed 2612; 421 not "
        "equivalent) stands. Every sample mutant was looked up in a fresh mutmut tree of "
        f"this branch by its diff (`make_plan.py`): {len(lost)} are not found: "
        f"{len(removed)} holes whose code round 5 or this round removed, "
        f"{len(R6_REMOVED_KILLED)} killed mutant whose code this round removed (they leave "
        f"the sample), {len(rewritten)} in functions other branches rewrote (killed in "
        "round 3, counted as before). Two of round 3's holes are equivalent by this round's "
        f"arguments (closed-r6.md): {n} non-equivalent mutants.",
        "",
        f"**Default matrix alone (CPU): {score(cpu_score)}**, against 83.7% (345 of 412) "
        f"after round 5. **With round 4's CUDA slice: {score(with_gpu)}** (370 of 412 "
        "after round 5). The target is 90% of the non-equivalent mutants killed by the "
        "default matrix (its CPU cells, and for the GPU-class code the CUDA slice): "
        f"{'met' if with_gpu >= 0.9 * n else 'not met'}; "
        f"CPU alone: {'met' if cpu_score >= 0.9 * n else 'not met'} "
        f"({len(gpu_names)} of the {n} are GPU code no CPU cell can run).",
        "",
        f"CPU matrix jobs counted ({len(counted)}): {dict(counts)}."
        + (f" Not run (deadline): {len(not_run)}." if not_run else ""),
        "",
        "## Not killed by the CPU matrix",
        "",
        "| mutant | result | verdict |",
        "| --- | --- | --- |",
    ]
    out += [f"| `{short(x)}` | {res(x)} | {why(x)} |" for x in left]
    out += ["", "## GPU-class (not run here; round 4's CUDA slice)", "",
            "| mutant | round 4 CUDA |", "| --- | --- |"]
    out += [f"| `{short(x)}` | {r4_cuda(x)} |" for x in sorted(gpu_names)]
    out += ["", "## Equivalent since this round", ""]
    out += [f"- `{short(x)}`: {EQUIVALENT[x]}" for x in EQUIVALENT]
    out += ["", "## Removed with their code (they no longer exist)", ""]
    out += [f"- `{short(x)}`: {verdicts.get(x, 'killed in round 3')[:160]}"
            for x in removed + list(R6_REMOVED_KILLED)]
    out += ["", "## Lost to other branches' rewrites (counted as before)", ""]
    out += [f"- `{short(x)}`: {lost[x][:160]}" for x in rewritten]
    out += ["", "## Every re-run mutant", "", "| mutant | result | round 3's verdict |",
            "| --- | --- | --- |"]
    for name in sorted(matrix):
        out.append(f"| `{short(name)}` | {res(name)} | {why(name)} |")
    for name in sorted(not_run):
        out.append(f"| `{short(name)}` | not run | {why(name)} |")
    (HERE / "README.md").write_text("\n".join(out).replace("|  |", "| |") + "\n")
    print(f"CPU {score(cpu_score)}; with CUDA {score(with_gpu)}; removed {len(removed)}+"
          f"{len(R6_REMOVED_KILLED)}, rewritten {len(rewritten)}, counted {dict(counts)}")


if __name__ == "__main__":
    main()
