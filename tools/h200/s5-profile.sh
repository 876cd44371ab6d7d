# Issue 28 on the H200, right after s4 on the warm machine: where the 8B B=256 step's
# device time goes (kernel classes timed alone), and the host/device split of a step
# (bench profile: forward build, MLX submit, device wait) at 1B B=1 and 8B B=256.
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
R=$OUT/p; mkdir -p $R
pack() { tar czf $OUT/profile.tgz -C $OUT p; }
timeout 45 python3 tools/h200/opprofile.py 256 192 > $R/opprofile.txt 2>&1; cat $R/opprofile.txt; pack
timeout 40 python3 -m batchlab bench profile --model llama-3.2-1b --batch 1 --prompt-len 128 --gen-len 128 \
  --paths l1,fast,invariant --repeats 2 --out $R/bprof > $R/bprof-1b.log 2>&1; grep "^|" $R/bprof-1b.log | tail -8; pack
timeout 60 python3 -m batchlab bench profile --model llama-3.1-8b --batch 256 --prompt-len 128 --gen-len 64 \
  --paths l1,fast --repeats 1 --out $R/bprof > $R/bprof-8b.log 2>&1; grep "^|" $R/bprof-8b.log | tail -8; pack
