"""Round 6: round 3's sample on the mut6 branch (issue 26 item 6).

As round 5's make_plan.py: every one of the sample's 450 mutants is looked up in a freshly
generated mutants tree of this branch by the lines its diff removes and adds. Lost ones
are named in ``lost.json`` (round 5's removals and rewrites, and this round's: the paged
copy-on-write and the ``written`` flag). One more is re-located by hand:
``RowCost.batch_bytes__mutmut_5`` (round 3's ``+`` -> ``-`` in the paged projection's
padding term) sits on a line round 4 rewrote; its mutation on today's line
(``per_token * (n + -n % bs)`` -> ``(n - -n % bs)``) is found by its diff and run; so is
``PagedKV.merged_into__mutmut_18`` (``append(t, None)``) on the line this round changed. Writes
``plan-r6.json`` (round 3's non-equivalent, non-GPU survivors that still exist, for
gate/mutation_run.py), ``gpu-names.txt`` and ``located.json``.

    python reports/mutation/2026-12-02-r6/make_plan.py /tmp/mutcamp6 OUTDIR
(run from the project root; /tmp/mutcamp6 is the copy of the tree where mutmut's
create_mutants ran; needs mutmut 3.8.1 for the diffs).
"""

import json
import os
import sys
from pathlib import Path

import tomllib

R3 = Path("reports/mutation/2026-12-02-r3")
GPU_CLASSES = ("gpu only", "cpu")  # 'gpu only', 'gpu only in effect', ..., 'cpu'
# round 3's mutation on a line rewritten since, found by today's change
RELOCATED = {
    "batchlab.engine.core.cost.xǁRowCostǁbatch_bytes__mutmut_5": [
        "-return sum(self.fixed + self.per_token * (n + -n % bs) + ring for n in lengths)",
        "+return sum(self.fixed + self.per_token * (n - -n % bs) + ring for n in lengths)"],
    # this round: append returns the slots (no Appended record with copies)
    "batchlab.engine.paths.paged.cache.xǁPagedKVǁmerged_into__mutmut_18": [
        "-slots = pool.manager.append(t, [None] * s)",
        "+slots = pool.manager.append(t, None)"],
}


def change(diff: str) -> list[str]:
    """The removed and added lines of a diff, stripped of spaces and of a trailing
    comment (coverage markers come and go): the mutation itself."""
    return [line[0] + line[1:].split("  # ")[0].strip() for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def verdict_class(text: str) -> str:
    return text.split("(", 1)[1].split(")", 1)[0] if text.startswith("hole (") else ""


def main() -> None:
    copy, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    verdicts = tomllib.loads((R3 / "verdicts.toml").read_text())["verdicts"]
    old_diffs = json.loads((R3 / "diffs.json").read_text())
    sample = [m["name"] for m in json.loads((R3 / "plan.json").read_text())["mutants"]]
    holes = {n: v for n, v in verdicts.items() if not v.startswith("equivalent")}
    here = os.getcwd()
    os.chdir(copy)  # mutmut reads mutants/ under the current folder
    import mutmut.__main__ as mm

    from batchlab.gate.mutation_plan import mutant_lines
    found, lost = {}, []
    lines_of: dict[str, dict[str, list[int]]] = {}
    for name in sorted(sample):
        module, _, short = name.rpartition(".")
        file = module.replace(".", "/") + ".py"
        if file not in lines_of:
            lines_of[file] = mutant_lines(copy / "mutants", file) if (
                copy / "mutants" / file).exists() else {}
        stem = short.rpartition("__mutmut_")[0]
        same_function = [s for s in lines_of[file] if s.rpartition("__mutmut_")[0] == stem]
        ordered = ([short] if short in lines_of[file] else []) + [
            s for s in same_function if s != short]
        want = RELOCATED.get(name) or change(old_diffs[name])
        for candidate in ordered:
            full = f"{module}.{candidate}"
            try:
                diff = mm.get_diff_for_mutant(full)
            except Exception:  # noqa: BLE001 - a name the new tree lacks
                continue
            if change(diff) == want:
                found[name] = (full, file, lines_of[file][candidate])
                break
        else:
            lost.append(name)
    os.chdir(here)
    cpu, gpu = [], []
    for name, (full, file, lines) in found.items():
        if name not in holes and name not in RELOCATED:  # relocated kills run again too
            continue
        if verdict_class(holes.get(name, "")).startswith(GPU_CLASSES):
            gpu.append(full)
        else:
            cpu.append({"name": full, "file": file, "lines": [[file, n] for n in lines]})
    (out / "plan-r6.json").write_text(json.dumps(
        {"generated": None, "seed": None, "size": len(cpu), "mutants": cpu, "per_file": {},
         "round3_names": {v[0]: k for k, v in found.items() if k in holes}}, indent=0))
    (out / "gpu-names.txt").write_text("".join(n + "\n" for n in gpu))
    (out / "lost.json").write_text(json.dumps(
        {n: verdicts.get(n, "killed in round 3") for n in lost}, indent=1))
    (out / "located.json").write_text(json.dumps({k: v[0] for k, v in found.items()},
                                                 indent=0))
    print(f"sample {len(sample)}: {len(found)} found, {len(lost)} lost; holes {len(holes)}: "
          f"{len(cpu)} CPU, {len(gpu)} GPU; lost: {lost}")


if __name__ == "__main__":
    main()
