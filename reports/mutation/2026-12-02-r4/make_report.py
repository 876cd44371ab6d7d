"""Write this folder's README from the plan, the two device results and round 3's verdicts.

    python reports/mutation/2026-12-02-r4/make_report.py
"""

import collections
import json
import tomllib
from pathlib import Path

from batchlab.gate.mutation_plan import wilson

HERE = Path(__file__).parent
R3 = HERE.parent / "2026-12-02-r3"
SAMPLE_NON_EQUIVALENT, R3_KILLED = 421, 308


def short(name: str) -> str:
    return name.removeprefix("batchlab.engine.")


def main() -> None:
    verdicts = tomllib.loads((R3 / "verdicts.toml").read_text())["verdicts"]
    plan = json.loads((HERE / "plan-r4.json").read_text())
    round3 = plan["round3_names"]  # today's name -> round 3's
    gpu_names = (HERE / "gpu-names.txt").read_text().split()
    cpu = [r for r in map(json.loads, (HERE / "results.jsonl").read_text().splitlines())]
    # the 5 capped ones again after the refusal cells were ranked early (gate/killers.py)
    cpu += [r for r in map(json.loads, (HERE / "capped-rerun.jsonl").read_text().splitlines())]
    gpu = [r for r in map(json.loads, (HERE / "gpu-results.jsonl").read_text().splitlines())]
    matrix = {r["name"]: r for r in cpu if r["kind"] == "matrix"}
    unit = {r["name"]: r for r in cpu if r["kind"] == "unit"
            and matrix[r["name"]]["status"] != "killed"}  # a re-run may kill it first
    cpu_killed = sum(r["status"] == "killed" for r in matrix.values())
    gpu_killed = sum(r["status"] == "killed" for r in gpu)
    counts = collections.Counter(r["status"] for r in matrix.values())
    unit_counts = collections.Counter(r["status"] for r in unit.values())

    def score(k: int) -> str:
        lo, hi = wilson(k, SAMPLE_NON_EQUIVALENT)
        return f"{k / SAMPLE_NON_EQUIVALENT:.1%} (95% interval {lo:.1%}-{hi:.1%}; {k} of {SAMPLE_NON_EQUIVALENT})"

    def why(name: str) -> str:
        text = verdicts[round3.get(name, name)]
        return text if len(text) < 220 else text[:217] + "..."

    out = [
        "# Mutation testing of batchlab/engine, round 4: round 3's survivors on today's matrix",
        "",
        "Issue 26 item 6. Round 3's sample (450 of 5151 mutants, seed 2612; 421 not equivalent; "
        f"{R3_KILLED} killed by the default matrix) stands; its {len(plan['mutants']) + len(gpu_names) + 1} "
        "non-equivalent survivors ran again after the `holes` and `refusals` branches (new cells: "
        "row-cost, park-queued, prefix-decoded, refuse-requests, llama-hd96, kv4h, nemotron-h). "
        "Each is found in a fresh mutmut tree by the lines its diff removes and adds "
        "(`make_plan.py`; 5 renumbered by edits around them; one, "
        "`RowCost.batch_bytes__mutmut_5`, no longer exists: its line is the one the row-cost "
        "cells found wrong and that was rewritten).",
        "",
        "- **CPU**: the default matrix less the real model's 6 cells (`mutation-default.toml`, 2086 "
        "cells; clean: 2045 PASS, 37 ORACLE-BUG, 4 UNSUPPORTED, as here), the line map made on the "
        "device, 40 s of cells per mutant, then the unit tests (`tests/unit/`). One device call: "
        "`C=.gpu-stage/mut4 ... PLAN=plan-r4.json END=430 CAP=40 UNITCAP=40 JOBS=15 "
        "UNITFILES=tests/unit/ bash .gpu-stage/mut4/run.sh` (166 s; `log.txt`, `results.jsonl`).",
        "- **CUDA**: the GPU-class survivors (CUDA kernels, and code whose effect shows only on a "
        "GPU) against `tools/h200/mutation-gpu.toml` with `--live` on the H200, one fresh matrix "
        "run per mutant (`batchlab/gate/mutation_gpu.py`, `tools/h200/s8-mutation-gpu.sh`; 369 s; "
        "`gpu-results.jsonl`; clean: 8/8 PASS, `gpu-clean-results.jsonl`).",
        "- **The 5 capped ones again** after `/explicit/refuse-requests/` was ranked among the "
        "first killers in `gate/killers.py` (same call with `MAPFILE=map.json.gz "
        "PLAN=plan-capped.json END=150`, 97 s; `capped-rerun.jsonl`): "
        "`Request.__post_init____mutmut_3` is killed by the refusal cell (20 cells in); the "
        "other 4 stay capped. These results replace the first call's for those 5.",
        "",
        f"**Default matrix alone (CPU): {score(R3_KILLED + cpu_killed)}**, against 73.2% in round 3. "
        f"With the CUDA slice on the H200 for the GPU-class mutants: {score(R3_KILLED + cpu_killed + gpu_killed)}. "
        "The target is 90%: not met.",
        "",
        f"CPU matrix jobs ({len(matrix)}): {dict(counts)}; their unit jobs: {dict(unit_counts)}. "
        f"CUDA jobs ({len(gpu)}): {gpu_killed} killed, {len(gpu) - gpu_killed} survived.",
        "",
        f"## What is left ({SAMPLE_NON_EQUIVALENT - R3_KILLED - cpu_killed} of 421 not killed by the CPU matrix)",
        "",
        "- **38 GPU-class** (CUDA kernels; code whose effect shows only on a GPU): the CUDA slice "
        "kills 25. Of the 13 it does not: 7 'gpu only in effect' (the attention dispatch's cache "
        "lookup, the SSM mask kept all-True, the lazy offset add, the invariant scheduler's "
        "init) keep every bit on the slice too; 2 are in the quantized attention, which no CUDA "
        "cell reaches (mlx-lm's serial quantized oracle cannot run there: its quantized_matmul "
        "is refused); 4 in the row kernels' launch (row_attention 17/58/69, make_dispatch 89).",
        "- **The engine's own call-order checks** (misuse, 8) and **mlx-lm's cache protocol** that "
        "BatchGenerator's callers use and the scheduler never calls (protocol, 8): no request "
        "reaches them; the unit tests gate them (closed-r4.md, closed-r4-refusals.md).",
        "- **Capped** (3, and one misuse check): their killers outlast 40 s (2066-2082 cells "
        "each) and none changed status on the 55-186 run; the unit tests kill 3 of the 4.",
        "- **Runs at import** (4) and a closure built at import (`refuses_quantized` 22/23): "
        "killed applied to the source, not switchable by the runner.",
        "- **Message-only and serve-only** (refusal 3, input 2, serve 3): refusal cells judge the "
        "kind, not the words.",
        "- **No cell builds the case** (11): a state row with a None array, WindowKV's mask at "
        "width == window (same bits on the CPU), paged copy-on-write of a partial block (only "
        "`fork` makes one), the quantized empty merges (the serial quantized oracle refuses a "
        "park before the first token), a stats counter, `TapConv1d` padding (mlx-lm builds "
        "every Conv1d with padding 0), `KVQuant.words` (no caller), a paged `append` and `extend` "
        "line, WindowKV's extract (the invariant path refuses history).",
        "",
        "## Every re-run mutant",
        "",
        "| mutant | where | result | round 3's verdict |",
        "| --- | --- | --- | --- |",
    ]
    for name in sorted(matrix):
        r = matrix[name]
        u = unit.get(name)
        res = r["status"] + (f" (unit: {u['status']})" if u else "")
        out.append(f"| `{short(name)}` | CPU | {res} | {why(name)} |")
    for r in sorted(gpu, key=lambda r: r["name"]):
        res = r["status"] + (f": {', '.join(r['moved'][:2])}" if r["moved"] else "")
        out.append(f"| `{short(r['name'])}` | CUDA | {res} | {why(r['name'])} |")
    out.append("| `core.cost.xǁRowCostǁbatch_bytes__mutmut_5` | - | its line was rewritten by "
               "the fix; applied to the new line the row-cost cells FAIL (closed-r4.md) | "
               f"{why('batchlab.engine.core.cost.xǁRowCostǁbatch_bytes__mutmut_5')} |")
    (HERE / "README.md").write_text("\n".join(out).replace("|  |", "| |") + "\n")


if __name__ == "__main__":
    main()
