"""Rewrite README.md and results.json of this campaign from its committed inputs:
plan.json, runner.jsonl (the device's results), verdicts.toml and diffs.json.
Run from the project root: python reports/mutation/2026-12-01-r2/make_report.py"""

import json
from pathlib import Path

from batchlab.gate.mutation_results import load_verdicts, read, write

D = Path(__file__).parent
NOTE = (
    "Campaign of 2026-12-01, round 2 (issue 26 item 6), engine at bf2da46 (the rooms: "
    "engine/{core,caches,kernels,paths}). mutmut 3.8.1 generated the 3991 mutants on the shared "
    "machine; the sampled 360 ran in one call on the H200 machine used as a 16-core CPU box "
    "(mlx 0.32.4 + mlx-cpu, mlx-lm 0.32.2; batchlab/gate/mutation_device.sh, log in "
    "device-log.txt). Killers: the default matrix less the real model's 3 cells "
    "(mutation-default.toml: 1776 cells, on the clean engine 1738 PASS, 36 ORACLE-BUG, "
    "2 UNSUPPORTED, as on the shared machine) and 10 engine unit-test files; each mutant got "
    "only the cells and tests that ran one of its changed lines on the clean engine "
    "(batchlab/gate/mutation_map.py), in fail-fast order, at most 8 s of cells per mutant "
    "(then 'capped', counted as not killed). Method, hole classes and limits: docs/mutation.md.")

plan = json.loads((D / "plan.json").read_text())
results = [json.loads(line) for line in (D / "runner.jsonl").read_text().splitlines()]
diffs = json.loads((D / "diffs.json").read_text())
left = write(D, plan, read(plan, results), load_verdicts(D / "verdicts.toml"), diffs, NOTE)
print("survivors without a verdict:", len(left))
