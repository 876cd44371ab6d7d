# Issue 28, fourth round (h200d), call 3 (after the two staging calls that copy the CUDA
# wheel's parts p1, p2 to /tmp/stage; this call carries .gpu-stage/h200b/p3 and
# .gpu-stage/h200d): item 3, where the 8B B=256 fast step goes, before and after.
#   1. the branch: main's tree copied to /tmp/h200d-tree, .gpu-stage/h200d/h200d.tgz (a
#      `git archive` of branch h200d) unpacked over it;
#   2. tools/h200/gqa_decode_probe.py: the grouped decode kernel against float32 and
#      MLX's fused attention, and their times (`GQA OK yes` gates call 4's "after");
#   3. Nsight Compute: every kernel of one fast decode step at llama-3.1-8b B=256 (192
#      keys), timed alone: before (BATCHLAB_FAST_GQA=0 BATCHLAB_FAST_FUSE=0: MLX's
#      attention, separate projections) and after (both on), then l1's;
#   4. `bench profile` of fast (after) at 8B B=256: forward build, submit, device wait.
# Run as: source .gpu-stage/h200b/p3/install.sh && bash .gpu-stage/h200d/s9-h200d-profile.sh
set -u
T=/tmp/h200d-tree
rm -rf $T && mkdir -p $T && tar cf - --exclude=./.gpu-stage . | tar xf - -C $T
tar xzf .gpu-stage/h200d/h200d.tgz -C $T && cd $T || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/p; mkdir -p $R
pack() { tar czf $OUT/p.tgz -C $OUT p; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
python3 -c 'import mlx.core as mx, mlx_lm; print(mx.__version__, mlx_lm.__version__, mx.default_device())' >> $R/gpu.txt 2>&1
cat $R/gpu.txt; cat .h200d-commit 2>/dev/null
timeout 80 python3 tools/h200/gqa_decode_probe.py > $R/gqa-probe.txt 2>&1; cat $R/gqa-probe.txt; pack
grep -q "^GQA OK yes" $R/gqa-probe.txt && touch /tmp/h200d-gqa-ok
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
N="$NCU --profile-from-start off --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw --print-units base"
for cfg in "before 0 fast" "after 1 fast" "l1 1 l1"; do set -- $cfg
  BATCHLAB_FAST_GQA=$2 BATCHLAB_FAST_FUSE=$2 timeout 110 $N python3 tools/h200/step_kernels.py \
    llama-3.1-8b 256 $3 64 > $R/ncu-$1.csv 2> $R/ncu-$1.err
  echo "== ncu $1: exit $?"; grep -v '^"' $R/ncu-$1.csv | tail -3; tail -3 $R/ncu-$1.err
  python3 tools/h200/ncu_summary.py $R/ncu-$1.csv "8B B=256 $1" 2>&1 | tee $R/ncu-$1.txt; pack
done
timeout 90 python3 -m batchlab bench profile --model llama-3.1-8b --batch 256 --prompt-len 128 \
  --gen-len 128 --paths fast --repeats 1 --out $R/profile > $R/profile.log 2>&1
echo "== bench profile: exit $?"; tail -12 $R/profile.log; cat $R/profile/*.md 2>/dev/null | tail -5
pack; ls -R $R | head -30
