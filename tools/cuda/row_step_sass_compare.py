"""Compare ``row_step``'s one-kernel step as ptxas compiles it (sm_90a, bf16,
llama-3.2-1b's shape) at a git revision and in the working tree, without a GPU: each
SASS opcode's count, and whether every floating-point, conversion, memory, shuffle,
barrier and atomic opcode count is equal. A refactor that keeps the arithmetic moves only
integer address instructions.

    python3 -m venv /tmp/nvrtc && /tmp/nvrtc/bin/pip install nvidia-cuda-nvrtc-cu12 \
        nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-cuobjdump \
        nvidia-cuda-nvdisasm
    PATH=/tmp/nvrtc/lib/python3.11/site-packages/nvidia/cu13/bin:$PATH \
        .venv/bin/python tools/cuda/row_step_sass_compare.py REV [NAME=VALUE ...]

(cuobjdump runs nvdisasm, which it looks for on PATH.)

NAME=VALUE: template constants beyond the shape's, each given to every kernel whose body
names it and does not declare it (e.g. STREAM=0: a revision without the constant
compiles without it). Exit
status 0 when those counts are equal.
"""

from __future__ import annotations

import collections
import glob
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.getcwd())

from batchlab.engine.kernels import row_step as current
from tools.h200 import looped_compile_check as lc
from tools.h200 import row_step_compile_check as rc

# HFMA2 left out: ptxas also uses it to move constants into registers (HFMA2.MMA R, -RZ,
# RZ, ...), and this kernel has no half-precision arithmetic
KEPT = ("F", "LDG", "STG", "LDS", "STS", "ATOM", "RED", "SHFL", "MUFU", "BAR", "MEMBAR",
        "CCTL")
# llama-3.2-1b: hidden, head dim, query heads, KV heads, intermediate, layers
SHAPE = (2048, 64, 32, 8, 8192, 16)


def _find(pattern: str) -> str:
    hits = glob.glob(pattern)
    if not hits:
        sys.exit(f"not found: {pattern} (see the docstring's setup)")
    return hits[0]


def _module_at(rev: str, tmp: str):
    path = os.path.join(tmp, "row_step_at_rev.py")
    with open(path, "w") as f:
        f.write(subprocess.run(["git", "show", f"{rev}:batchlab/engine/kernels/row_step.py"],
                               check=True, capture_output=True, text=True).stdout)
    spec = importlib.util.spec_from_file_location("row_step_at_rev", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def opcodes(module, extra: list[tuple[str, int]], tmp: str) -> collections.Counter:
    site = "/tmp/nvrtc/lib/python3*/site-packages/nvidia"
    nvrtc = lc.Nvrtc(_find(f"{site}/cuda_nvrtc/lib/libnvrtc.so.12"))
    include = _find(f"{site}/cuda_runtime/include")
    hidden, dim, n_q, n_kv, inter, layers = SHAPE
    consts = [("K", hidden), ("D", dim), ("NQ", n_q), ("NKV", n_kv), ("INTER", inter),
              ("L", layers), ("NP", len(module.layer_input_names(False))), ("QKN", 0),
              ("MAXS", module.MAX_SPLITS), ("LD", module.LOADS), ("SKIP", 0), ("BAR", 0),
              ("PF", 1), *extra]
    rc.rs = module  # wrap() reads the module's header, inputs and outputs
    source = rc.wrap(module.source(layers, False), "__nv_bfloat16", consts,
                     module.input_names(layers, False))
    ok, log, ptx = nvrtc.ptx(source, ["--gpu-architecture=compute_90a", "--std=c++17",
                                      f"-I{include}"])
    if not ok:
        sys.exit(log)
    ptx_path, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
    with open(ptx_path, "w") as f:
        f.write(ptx)
    subprocess.run([_find(f"{site}/cuda_nvcc/bin/ptxas"), "-arch=sm_90a", "-O3", ptx_path,
                    "-o", cubin], check=True)
    sass = subprocess.run([_find(f"{site}/cu13/bin/cuobjdump"), "-sass", cubin],
                          check=True, capture_output=True, text=True).stdout
    counts = collections.Counter()
    for line in sass.splitlines():
        line = line.strip()
        if line.startswith("/*") and "*/" in line:
            body = line.split("*/", 1)[1].split(";")[0].strip()
            if body and not body.startswith("/*"):  # "@!P0 FFMA.FTZ R1, ..." -> FFMA
                counts[re.split(r"[ .]", re.sub(r"^@!?U?P\w+\s+", "", body))[0]] += 1
    return counts


def main() -> int:
    rev, extra = sys.argv[1], [(k, int(v)) for k, v in (a.split("=") for a in sys.argv[2:])]

    def named(module) -> list[tuple[str, int]]:  # named by the body, not declared in it
        return [(k, v) for k, v in extra if re.search(rf"\b{k}\b", module.BODY)
                and not re.search(rf"constexpr int {k} =", module.BODY)]

    with tempfile.TemporaryDirectory() as tmp:
        earlier = _module_at(rev, tmp)
        before = opcodes(earlier, named(earlier), tmp)
        after = opcodes(current, named(current), tmp)
    print(f"{rev}: {sum(before.values())} instructions; working tree: {sum(after.values())}")
    moved = {k: (before[k], after[k]) for k in sorted(before | after) if before[k] != after[k]}
    print("counts that differ:", moved)
    kept = {k: (before[k], after[k]) for k in sorted(before | after) if k.startswith(KEPT)}
    print("arithmetic, memory and sync opcodes:", kept)
    same = all(b == a for b, a in kept.values())
    print(f"ARITHMETIC SAME {'yes' if same else 'no'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
