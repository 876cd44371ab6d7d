"""Compile ``row_chain``'s kernels with NVRTC as ``mx.fast.cuda_kernel`` would (no GPU
needed), at the real models' and the CUDA zoo's shapes, then ``ptxas -v`` for registers,
spills and stack (``looped_compile_check.py``'s tools and its docstring's setup).

    python3 -m tools.h200.chain_compile_check   (from the project root)
"""

from __future__ import annotations

import sys

import mlx.core as mx

from batchlab.engine.kernels import row_chain as rc
from tools.h200.looped_compile_check import CUDA_TYPES, PRELUDE, compile_all

# (name, hidden, head dim, query heads, KV heads, intermediate)
SHAPES = [("llama-3.2-1b", 2048, 64, 32, 8, 8192), ("qwen3-0.6b", 1024, 128, 16, 8, 3072),
          ("llama-3.1-8b", 4096, 128, 32, 8, 14336), ("llama-hd64", 64, 64, 4, 2, 128),
          ("qwen3-hd128", 64, 128, 4, 2, 128), ("llama", 64, 16, 4, 4, 128)]
INPUT_TYPES = {"eps": "float", "rot_cos": "float", "rot_sin": "float"}


def wrap(name: str, source: str, ctype: str, consts: list[tuple[str, int]],
         inputs: tuple[str, ...], outputs: tuple[str, ...]) -> str:
    params = [f"const {INPUT_TYPES.get(arg, ctype)}* {arg}" for arg in inputs]
    params += [f"{ctype}* {o}" for o in outputs]
    body = f"  using T = {ctype};\n" + "".join(f"  constexpr int {k} = {v};\n" for k, v in consts)
    return (PRELUDE + rc.HEADER + "namespace mlx::core::cu {\n\n"
            f"__global__ void {name}(\n    " + ",\n    ".join(params) + ") {\n"
            + body + "\n" + source + "\n}\n\n} // namespace mlx::core::cu\n")


def compiles():
    for dtype, (ctype, size) in CUDA_TYPES.items():
        for model, hidden, dim, n_q, n_kv, inter in SHAPES:
            qkv_units = (n_q + 2 * n_kv) * dim // 2
            for kernel, k, units, consts in (
                    ("norm_qkv", hidden, qkv_units,
                     [("HD", dim), ("NQ", n_q), ("NKV", n_kv), ("ROPE", 1)]),
                    ("norm_qkv", hidden, qkv_units,
                     [("HD", dim), ("NQ", n_q), ("NKV", n_kv), ("ROPE", 0)]),
                    ("residual", n_q * dim, hidden // 2, []),
                    ("residual", inter, hidden // 2, []),
                    ("norm_swiglu", hidden, inter, [])):
                if k % (16 // size):
                    continue
                # the launch's own slices, and one slice (every lane a whole row)
                for slices in sorted({1, rc.slices_for(units, k, getattr(mx, dtype))}):
                    consts_all = [("LD", rc.LOADS), ("S", slices), ("K", k),
                                  ("UNITS", units), *consts]
                    inputs, outputs, source = rc.KERNELS[kernel]
                    tag = f"{kernel:11s} {dtype:8s} {model:12s} " + " ".join(
                        f"{n}={v}" for n, v in consts_all[1:])
                    yield tag, wrap(f"k_{kernel}", source, ctype, consts_all, inputs,
                                    outputs)


def main() -> int:
    # no stack frame: norm_qkv reads RoPE's cos / sin, made outside it (row_chain.rotation)
    return compile_all(compiles())


if __name__ == "__main__":
    sys.exit(main())
