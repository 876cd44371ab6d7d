"""Run as on 2026-12-02 (paths as then): /tmp/mut3m = tree.tgz + mutants.tgz unpacked (the
device script's M folder, from its TRIAL run), /tmp/map3/map.json = the carried map.
Usage: python capped_beyond.py SECONDS (75 here). Output: /tmp/beyond3.jsonl = capped-beyond.jsonl."""
# the capped survivors: their killer cells past the device's cap, here, one mutant at a time
import json, os, subprocess, sys
sys.path.insert(0, "/tmp/mut3m")
R = "/work/wt-mutation3/reports/mutation/2026-12-02-r3/"
m = json.load(open("/tmp/map3/map.json"))
plan = {x["name"]: x for x in json.load(open(R + "plan.json"))["mutants"]}
res = [json.loads(l) for l in open(R + "runner.jsonl")]
from batchlab.gate.mutation_run import killer_cells
CHILD = r'''
import json, sys, time
from batchlab.gate.mutation_shim import install; install()
from pathlib import Path
from batchlab.cells.spec import load_matrix
from batchlab.matrix.evaluate import Reference, evaluate_cell
ids = json.loads(sys.argv[1]); budget = float(sys.argv[2]); clean = json.loads(sys.argv[3])
cells = {c.id: c for c in load_matrix(Path("matrices/mutation-default.toml"))}
ref = Reference(matrix="matrices/mutation-default.toml", goldens=Path("goldens"))
t0 = time.time(); n = 0
for cid in ids:
    if time.time() - t0 > budget:
        print(json.dumps({"status": "capped again", "cells_run": n})); break
    try:
        st = str(evaluate_cell(cells[cid], ref).status)
    except Exception as e:
        st = "CRASH"
    n += 1
    if st != clean[cid]:
        print(json.dumps({"status": "killed", "by": cid, "got": st, "cells_run": n})); break
else:
    print(json.dumps({"status": "survived", "cells_run": n}))
'''
out = open("/tmp/beyond3.jsonl", "a")
for r in res:
    if r["kind"] != "matrix" or r["status"] != "capped":
        continue
    ks = killer_cells([tuple(x) for x in plan[r["name"]]["lines"]], m["lines"], m["cells"])
    rest = ks[r["cells_run"]:]
    clean = {c: m["cells"][c]["status"] for c in rest}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(rest), sys.argv[1], json.dumps(clean)],
                       cwd="/tmp/mut3m", env={**os.environ, "PYTHONPATH": "/tmp/mut3m", "MUTANT_UNDER_TEST": r["name"]},
                       capture_output=True, text=True)
    line = (p.stdout.strip().splitlines() or ["{}"])[-1]
    d = json.loads(line); d.update(name=r["name"], skipped=r["cells_run"], rest=len(rest))
    out.write(json.dumps(d) + "\n"); out.flush(); print(d, flush=True)
