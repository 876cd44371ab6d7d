#!/usr/bin/env bash
# On the H200 device machine, after ../shared/device/install.sh has put MLX (CUDA) and
# mlx-lm on PYTHONPATH: make CUDA goldens for matrices/cuda.toml with the oracle, run the
# engine against them, and leave both (plus a bit-diff of every non-exact cell) in $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1
key=$(python3 -c 'from batchlab.backend import backend_key; print(backend_key())')
echo "backend: $key"
python3 -m batchlab golden regen --matrix matrices/cuda.toml --jobs 4
python3 -m batchlab golden check --matrix matrices/cuda.toml
python3 -m batchlab matrix run --matrix matrices/cuda.toml --jobs 4 --report "$OUT/cuda-report"
# lab paths that are not bit-exact here: KL statistics against the live oracle, each cell
# run twice (a kernel that does not repeat itself passes or fails by chance)
python3 -m batchlab matrix run --matrix matrices/cuda.toml --filter 'fast/' --live --repeat \
  --jobs 4 --report "$OUT/cuda-fast-live"
# large B past 256 keys at the real head counts, where MLX's cuDNN decode did not repeat
python3 -m batchlab matrix run --matrix matrices/cuda-repeat.toml --live --repeat --jobs 4 \
  --report "$OUT/cuda-repeat"
tar czf "$OUT/cuda-goldens.tgz" "goldens/$key"
tar czf "$OUT/cuda-report.tgz" -C "$OUT" cuda-report cuda-fast-live cuda-repeat
rm -rf "$OUT/cuda-report" "$OUT/cuda-fast-live" "$OUT/cuda-repeat"
