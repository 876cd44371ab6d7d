"""Round 4: round 3's survivors again, on today's engine and matrix (issue 26 item 6).

Reads round 3's verdicts (every matrix survivor not judged equivalent, the ones closed since included), finds each
mutant in a freshly generated mutants tree by the lines its diff removes and adds (mutmut numbers mutants per
function, so an edited function renumbers them; the diff is what identifies a mutant),
and writes two plans: the CPU one for gate/mutation_run.py (with the changed lines from
gate/mutation_plan.py) and the names of the GPU-class ones for gate/mutation_gpu.py.

    python reports/mutation/2026-12-02-r4/make_plan.py /tmp/mutcamp4 OUTDIR
(run from the project root; /tmp/mutcamp4 is the copy of the tree where mutmut's
create_mutants ran; needs mutmut 3.8.1 for the diffs).
"""

import json
import os
import sys
import tomllib
from pathlib import Path

R3 = Path("reports/mutation/2026-12-02-r3")
GPU_CLASSES = ("gpu only", "cpu")  # 'gpu only', 'gpu only in effect', 'gpu only in effect, capped', 'cpu'


def change(diff: str) -> list[str]:
    """The removed and added lines of a diff, stripped of spaces and of a trailing
    comment (coverage markers come and go): the mutation itself, whatever context an edit
    of the function around it changed."""
    return [line[0] + line[1:].split("  # ")[0].strip() for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def verdict_class(text: str) -> str:
    return text.split("(", 1)[1].split(")", 1)[0] if text.startswith("hole (") else ""


def main() -> None:
    copy, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    verdicts = tomllib.loads((R3 / "verdicts.toml").read_text())["verdicts"]
    old_diffs = json.loads((R3 / "diffs.json").read_text())
    holes = {n: v for n, v in verdicts.items() if not v.startswith("equivalent")}
    here = os.getcwd()
    os.chdir(copy)  # mutmut reads mutants/ under the current folder
    import mutmut.__main__ as mm

    from batchlab.gate.mutation_plan import mutant_lines
    found, moved, lost = {}, {}, []
    lines_of: dict[str, dict[str, list[int]]] = {}
    for name in sorted(holes):
        module, _, short = name.rpartition(".")
        file = module.replace(".", "/") + ".py"
        if file not in lines_of:
            lines_of[file] = mutant_lines(copy / "mutants", file)
        stem = short.rpartition("__mutmut_")[0]
        same_function = [s for s in lines_of[file] if s.rpartition("__mutmut_")[0] == stem]
        ordered = [short] + [s for s in same_function if s != short]
        for candidate in ordered:
            full = f"{module}.{candidate}"
            try:
                diff = mm.get_diff_for_mutant(full)
            except Exception:  # noqa: BLE001 - a name the new tree lacks
                continue
            if change(diff) == change(old_diffs[name]):
                found[name] = (full, file, lines_of[file][candidate])
                if candidate != short:
                    moved[name] = full
                break
        else:
            lost.append(name)
    os.chdir(here)
    cpu, gpu = [], []
    for name, (full, file, lines) in found.items():
        cls = verdict_class(holes[name])
        if cls.startswith(GPU_CLASSES):
            gpu.append(full)
        else:
            cpu.append({"name": full, "file": file, "lines": [[file, n] for n in lines]})
    (out / "plan-r4.json").write_text(json.dumps(
        {"generated": None, "seed": None, "size": len(cpu), "mutants": cpu, "per_file": {},
         "round3_names": {v[0]: k for k, v in found.items()}}, indent=0))
    (out / "gpu-names.txt").write_text("".join(n + "\n" for n in gpu))
    print(f"{len(holes)} holes: {len(cpu)} CPU, {len(gpu)} GPU, {len(moved)} renumbered, "
          f"{len(lost)} not found (code changed under them): {lost}")


if __name__ == "__main__":
    main()
