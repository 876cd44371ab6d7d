#!/usr/bin/env bash
# Stage MLX's CUDA backend and the real model (smollm2-135m's converted directory) for
# the H200: each call carries the working tree too (38 MiB of tracked files; a call
# carries 64 MiB in all), so the payload travels xz-compressed (the wheel unzipped first:
# xz takes it from 90 to 75 MB, where it takes the zip 2% smaller) in PART-sized pieces:
# 158 MiB, eight 20 MiB parts (24 MiB parts stopped fitting once the tree passed 38 MiB).
# Run from the project root after ../shared/device/stage.sh (which downloads the wheels
# into .gpu-stage/a and b) and after the real model was built here once
# (BATCHLAB_CACHE=/tmp/blc batchlab lab kl --model smollm2-135m ...). Writes
# .gpu-stage/bundle/q1..qN; then, back to back:
#   run carry=[.gpu-stage/bundle/qK] for K < N: mkdir -p /tmp/stage && cp .gpu-stage/bundle/qK/* /tmp/stage/
#   run carry=[.gpu-stage/bundle/qN]: source .gpu-stage/bundle/qN/install.sh && bash tools/h200/<script>
set -euo pipefail
root=$(git rev-parse --show-toplevel); st=$root/.gpu-stage; zoo=${ZOO:-/tmp/blc/zoo}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pack/cuda" "$work/pack/zoo"
cat "$st"/a/cuda.part.* "$st"/b/cuda.part.* > "$work/cuda.whl"
python3 -m zipfile -e "$work/cuda.whl" "$work/pack/cuda"
cp "$st"/b/mlx-[0-9]*.whl "$st"/b/mlx_lm-*.whl "$work/pack/"
# ZOO=none: no real model (the kernel probes and the benches build their shapes)
[ "$zoo" = none ] || cp -r "$zoo"/smollm2-135m-* "$work/pack/zoo/"
tar -cf - -C "$work/pack" . | xz -T2 -9 > "$work/all.tar.xz"
rm -rf "$st/bundle" && mkdir -p "$st/bundle"
split -b "${PART:-20m}" "$work/all.tar.xz" "$work/all.part."
n=1; for p in "$work"/all.part.*; do mkdir -p "$st/bundle/q$n"; mv "$p" "$st/bundle/q$n/"; n=$((n + 1)); done
last=$((n - 1))
sed "s#@LAST@#q$last#" > "$st/bundle/q$last/install.sh" <<'INSTALL'
# Sourced on the device from the project root: unpack the bundle, MLX (CUDA) into /tmp/site,
# the real model into /tmp/blc/zoo (python's lzma: no xz binary needed there).
set -e
cp .gpu-stage/bundle/@LAST@/all.part.* /tmp/stage/
rm -rf /tmp/site /tmp/unpack && mkdir -p /tmp/site /tmp/unpack /tmp/blc/zoo
cat /tmp/stage/all.part.* | python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" | tar -x -C /tmp/unpack
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/unpack/mlx-[0-9]*.whl /tmp/unpack/mlx_lm-*.whl
cp -r /tmp/unpack/cuda/. /tmp/site/
cp -r /tmp/unpack/zoo/. /tmp/blc/zoo/
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD BATCHLAB_CACHE=/tmp/blc
python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.default_device())'
set +e
INSTALL
du -sh "$st"/bundle/q*
