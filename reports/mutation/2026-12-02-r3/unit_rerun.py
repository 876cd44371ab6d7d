"""Run as on 2026-12-02 (paths as then; see capped_beyond.py). Output: unit-rerun.jsonl."""
# re-run the unit jobs that the device could not (tests/serve's conftest needs packages the
# device lacks: pytest exit 4): each mutant switched on in the mutants tree, its unit tests
import json, os, subprocess, sys
sys.path.insert(0, "/work/wt-mutation3")
from batchlab.gate.mutation_run import unit_tests
m = json.load(open("/tmp/map3/map.json"))
plan = {x["name"]: x for x in json.load(open("/work/wt-mutation3/reports/mutation/2026-12-02-r3/plan.json"))["mutants"]}
res = [json.loads(l) for l in open("/work/wt-mutation3/reports/mutation/2026-12-02-r3/runner.jsonl")]
bad = [r["name"] for r in res if r["status"] == "pytest exit 4"]
out = open("/tmp/unit3.jsonl", "a")
for n in bad:
    t = unit_tests([tuple(x) for x in plan[n]["lines"]], m["unit"], ["tests/unit/", "tests/serve/"])
    code = subprocess.run([sys.executable, "-c",
        "import sys; from batchlab.gate.mutation_shim import install; install(); import pytest; "
        "sys.exit(pytest.main(sys.argv[1:]))", *t, "-x", "-q", "--no-header", "-p", "no:cacheprovider",
        "-p", "no:randomly", "-n", "0"], cwd="/tmp/mut3m", env={**os.environ, "PYTHONPATH": "/tmp/mut3m",
        "MUTANT_UNDER_TEST": n}, capture_output=True, text=True, timeout=600).returncode
    status = {0: "survived", 1: "killed", 5: "no tests"}.get(code, f"pytest exit {code}")
    out.write(json.dumps({"name": n, "kind": "unit", "status": status, "where": "shared machine"}) + "\n"); out.flush()
    print(n, status, flush=True)
