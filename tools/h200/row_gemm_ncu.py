"""One row GEMM product, llama-3.1-8b's gate (K 4096, N 14336) at 256 rows, through the
class-warp kernel's default shape and the tiled kernel's, for Nsight Compute's sections
(s50-class-warps.sh 5): what bounds the kernel at large M.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/row_gemm_ncu.py
"""

from __future__ import annotations

import math

import mlx.core as mx

from batchlab.engine.kernels.row_gemm import CANDIDATE_CLASS_WARPS, TILED, row_gemm

mx.random.seed(0)
x = mx.random.normal((256, 4096)).astype(mx.bfloat16)
w = (mx.random.normal((14336, 4096)) / math.sqrt(4096)).astype(mx.bfloat16)
mx.eval(x, w)
for shape in (CANDIDATE_CLASS_WARPS[0], TILED):
    for _ in range(3):
        mx.eval(row_gemm(x, w, shape=shape))
print("row_gemm_ncu: 3 products a shape", flush=True)
