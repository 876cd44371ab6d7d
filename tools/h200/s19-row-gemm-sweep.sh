# Issue 28 item 1, session 2026-12-02b, call 4 (after the staging calls): the row GEMM's
# launch shapes (tools/h200/row_gemm_sweep.py: every candidate the default's bits, then
# their times at M 1-256 on llama-3.2-1b's and llama-3.1-8b's projections), the probe
# of the defaults (XB now a template switch), and the grouped calls' probe (s18's step 1).
# Run as: source .gpu-stage/h200f/q4/install.sh && bash tools/h200/s19-row-gemm-sweep.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/w; mkdir -p $R
pack() { tar czf $OUT/w.tgz -C $OUT w; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
timeout 300 python3 tools/h200/row_gemm_sweep.py > $R/sweep.txt 2>&1
echo "== sweep: exit $?"; grep -E "SAME|DIFFERS|best|Error|error" $R/sweep.txt | cut -c1-220; pack
QUICK=1 timeout 200 python3 tools/h200/row_gemm_probe.py > $R/probe.txt 2>&1
echo "== probe: exit $?"; grep -E "INVARIANT|ACCURATE|differ|FAR|grouped.*False|^K=|Error" $R/probe.txt | cut -c1-200; pack
