"""Round 7's figures and tables from the CUDA and CPU runs of the GPU-class mutants.

    python reports/mutation/2026-12-02-r7/make_report.py > reports/mutation/2026-12-02-r7/figures.md

Inputs (this folder): ``cuda-map.jsonl`` / ``cuda-mutants.jsonl`` (the H200 call,
tools/h200/s12-mut7-gpu.sh), ``cpu-map.jsonl`` / ``cpu-mutants.jsonl`` (the same runner on
the shared machine's CPU against the committed goldens, ``cpu-filter.txt``'s cells),
``located-gpu.json`` (round 6's names -> this tree's) and ``verdicts.toml`` (this round's
reading of each GPU-class mutant no default cell kills). Round 6's figures: 407
non-equivalent mutants, 351 killed by the default matrix's CPU cells, 376 with round 4's
CUDA slice (its 25 kills of the 38 GPU-class mutants).
"""

import json
from pathlib import Path

import tomllib

from batchlab.gate.mutation_plan import wilson

HERE = Path(__file__).parent
R4 = HERE.parent / "2026-12-02-r4"
N, CPU_R6, SLICE_R6 = 407, 351, 376
# round 4 ran make_dispatch 135 (round 6's 124) under round 5's number
R4_NAME = {"batchlab.engine.kernels.attention_dispatch.x_make_dispatch__mutmut_135":
           "batchlab.engine.kernels.attention_dispatch.x_make_dispatch__mutmut_89"}
EXTRA = ("batchlab.engine.caches.rowints.xǁRowUploadsǁupload__mutmut_8",
         "batchlab.engine.caches.rowints.xǁRowUploadsǁupload__mutmut_10")


def rows(name: str) -> list[dict]:
    path = HERE / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def score(k: int, n: int = N) -> str:
    low, high = wilson(k, n)
    return f"{100 * k / n:.1f}% (95% interval {100 * low:.1f}-{100 * high:.1f}%; {k} of {n})"


def short(name: str) -> str:
    return name.removeprefix("batchlab.engine.")


def outcome(r: dict | None) -> str:
    if r is None:
        return "not run"
    if r["status"] == "killed":
        return f"killed by `{r['by']}` ({r['got']}, {r['cells_run']} of {r['cells']})"
    if r["status"] in ("survived", "capped"):
        return f"{r['status']} ({r['cells_run']} of {r['cells']} cells)"
    return r["status"]


def main() -> None:
    located = json.loads((HERE / "located-gpu.json").read_text())
    r6_names = (HERE.parent / "2026-12-02-r6" / "gpu-names.txt").read_text().split()
    gpu = [located[n] for n in r6_names]
    r6_of = {v: k for k, v in located.items()}
    cuda = {r["name"]: r for r in rows("cuda-mutants.jsonl")}
    cpu = {r["name"]: r for r in rows("cpu-mutants.jsonl")}
    r4 = {r["name"]: r["status"] for r in rows("../2026-12-02-r4/gpu-results.jsonl")}
    verdicts = tomllib.loads((HERE / "verdicts.toml").read_text())["verdicts"] if (
        HERE / "verdicts.toml").exists() else {}

    def killed(table: dict, name: str) -> bool:
        return table.get(name, {}).get("status") == "killed"

    k_cpu = [n for n in gpu if killed(cpu, n)]
    k_cuda = [n for n in gpu if killed(cuda, n)]
    k_both = [n for n in gpu if killed(cpu, n) or killed(cuda, n)]
    k_slice = [n for n in gpu if r4.get(r6_of[n]) == "killed" or r4.get(n) == "killed"]
    extra_cuda = [n for n in EXTRA if killed(cuda, n)]
    print("## Figures\n")
    strict = CPU_R6 + len(k_both) + len(extra_cuda)
    print(f"- **Default matrix alone, CPU and CUDA cells: {score(strict)}**"
          f" (round 6's 351 CPU kills, {len(k_both)} of the 38 GPU-class mutants killed by "
          f"default cells on either backend ({len(k_cuda)} on CUDA, {len(k_cpu)} on the CPU), "
          f"{len(extra_cuda)} of the 2 int64-upload mutants killed on CUDA)")
    print(f"- Default matrix, CPU cells alone: {score(CPU_R6 + len(k_cpu))}")
    either = [n for n in gpu if n in k_both or n in k_slice]
    print(f"- With round 4's CUDA slice as well: {score(CPU_R6 + len(either) + len(extra_cuda))} "
          f"(round 6: {SLICE_R6})")
    print("\n## The clean map on CUDA\n")
    print("| cell | status | seconds | detail |\n| --- | --- | --- | --- |")
    for r in rows("cuda-map.jsonl"):
        print(f"| `{r['cell']}` | {r['status']} | {r.get('seconds', '')} | "
              f"{r.get('detail', '')[:160].replace('|', '/')} |")
    print("\n## Each GPU-class mutant\n")
    print("| mutant (this tree) | round 4 slice | CPU cells | CUDA default cells | verdict |")
    print("| --- | --- | --- | --- | --- |")
    for n in gpu + list(EXTRA):
        slice_ = r4.get(R4_NAME.get(n, r6_of.get(n, n)), "") or "-"
        verdict = verdicts.get(n, "")
        if killed(cuda, n) and verdict.startswith("not measured"):
            # the verdict was written before the CUDA mutant phase ran; the run decides
            verdict = "killed on CUDA by a default cell (measured: the CUDA column)"
        elif n in cuda and verdict.startswith("not measured"):
            verdict = verdict.replace("not measured (device)", "run on CUDA, not killed by the "
                                      "cells the call's per-mutant limit let run", 1)
        print(f"| `{short(n)}` | {slice_} | {outcome(cpu.get(n))} | {outcome(cuda.get(n))} | "
              f"{verdict} |")


if __name__ == "__main__":
    main()
