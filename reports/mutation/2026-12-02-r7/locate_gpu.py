"""Round 7: the 38 GPU-class mutants of round 3's sample, found again on the mut7 branch.

Round 6 ran them at c30f807's engine; since then the row kernels learnt MLA's additive
scores (6a0e6b2) and other lines moved, so mutmut's numbers move too. As make_plan.py of
rounds 5-6: each mutant is looked up in a fresh mutmut tree of this branch (mutmut 3.8.1's
``create_mutants`` with ``only_mutate`` narrowed to the seven files that hold them: a
mutant's name numbers the mutations of its own function, so the narrowing renames
nothing) by the lines its round-3 diff removes and adds. Writes ``gpu-names.txt`` (the
names in this tree) and ``located-gpu.json`` (round 6's name -> this round's).

    python reports/mutation/2026-12-02-r7/locate_gpu.py /tmp/mutcamp7 OUTDIR
(run from the project root; /tmp/mutcamp7 holds the mutants/ tree; needs mutmut 3.8.1).
"""

import json
import os
import sys
from pathlib import Path

R3 = Path("reports/mutation/2026-12-02-r3")
R6 = Path("reports/mutation/2026-12-02-r6")


def change(diff: str) -> list[str]:
    """The removed and added lines of a diff, stripped of spaces and of a trailing
    comment (coverage markers come and go): the mutation itself."""
    return [line[0] + line[1:].split("  # ")[0].strip() for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def context(diff: str) -> set[str]:
    """The unchanged lines around the mutation: they tell apart two equal changes in one
    function (make_dispatch's ``if cache is not None`` before the decode and the prefill
    kernels)."""
    return {line[1:].strip() for line in diff.splitlines() if line[:1] == " "}


def main() -> None:
    copy, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    old_diffs = json.loads((R3 / "diffs.json").read_text())
    located_r6 = json.loads((R6 / "located.json").read_text())
    r3_of = {v: k for k, v in located_r6.items()}
    names = (R6 / "gpu-names.txt").read_text().split()
    os.chdir(copy)  # mutmut reads mutants/ under the current folder
    import mutmut.__main__ as mm

    from batchlab.gate.mutation_plan import mutant_lines
    found, lost = {}, []
    for name in names:
        module, _, short = name.rpartition(".")
        file = module.replace(".", "/") + ".py"
        stem = short.rpartition("__mutmut_")[0]
        candidates = [s for s in mutant_lines(copy / "mutants", file)
                      if s.rpartition("__mutmut_")[0] == stem]
        candidates.sort(key=lambda s: (s != short, s))  # the old number first
        old = old_diffs[r3_of.get(name, name)]
        matches = []
        for candidate in candidates:
            full = f"{module}.{candidate}"
            try:
                diff = mm.get_diff_for_mutant(full)
            except Exception:  # noqa: BLE001 - a name the new tree lacks
                continue
            if change(diff) == change(old):
                matches.append((len(context(diff) & context(old)), candidate == short, full))
        if matches:
            found[name] = max(matches)[2]  # the most context in common, then the old number
        else:
            lost.append(name)
    (out / "gpu-names.txt").write_text("".join(found[n] + "\n" for n in names if n in found))
    (out / "located-gpu.json").write_text(json.dumps(found, indent=0))
    moved = {k: v for k, v in found.items() if k != v}
    print(f"{len(names)} GPU-class: {len(found)} found ({len(moved)} renumbered: {moved}), "
          f"lost: {lost}")


if __name__ == "__main__":
    main()
