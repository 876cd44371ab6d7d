"""Compile ``row_step``'s one-kernel decode step with NVRTC as ``mx.fast.cuda_kernel``
would (no GPU needed), at the real models' and the CUDA zoo's shapes, then ``ptxas -v``
for registers, spills and stack (``looped_compile_check.py``'s tools and its docstring's
setup).

    python3 -m tools.h200.row_step_compile_check   (from the project root)
"""

from __future__ import annotations

import sys

import mlx.core as mx

from batchlab.engine.kernels import row_step as rs
from tools.h200.looped_compile_check import CUDA_TYPES, PRELUDE, compile_all

# (name, hidden, head dim, query heads, KV heads, intermediate, layers, head norms)
SHAPES = [("llama-3.2-1b", 2048, 64, 32, 8, 8192, 16, False),
          ("qwen3-0.6b", 1024, 128, 16, 8, 3072, 28, True),
          ("llama-3.1-8b", 4096, 128, 32, 8, 14336, 32, False),
          ("llama-hd64", 64, 64, 4, 2, 128, 2, False),
          ("qwen3-hd128", 64, 128, 4, 2, 128, 2, True)]


def wrap(source: str, ctype: str, consts: list[tuple[str, int]], inputs: list[str]) -> str:
    # MLX's header brings <cstdint>; these stand in for it
    types = {**rs.INPUT_TYPES, "meta": "int", "barrier": "unsigned"}
    params = [f"const {types.get(arg, ctype)}* {arg}" for arg in inputs]
    params += [f"{'float' if o == 'part' else ctype}* {o}" for o in rs.OUTPUTS]
    body = f"  using T = {ctype};\n" + "".join(f"  constexpr int {k} = {v};\n" for k, v in consts)
    return (PRELUDE + rs.HEADER + "namespace mlx::core::cu {\n\n"
            "__global__ void row_step(\n    " + ",\n    ".join(params) + ") {\n"
            + body + "\n" + source + "\n}\n\n} // namespace mlx::core::cu\n")


def compiles():
    for dtype, (ctype, _) in CUDA_TYPES.items():
        for model, hidden, dim, n_q, n_kv, inter, layers, norms in SHAPES:
            used = rs.shared_bytes(getattr(mx, dtype), hidden, dim, n_q, inter, layers, norms)
            if used > rs.SHARED_BYTES:
                print(f"{dtype:8s} {model:12s}: {used} bytes of shared memory, not compiled")
                continue
            # the barrier's kind, the L2 prefetch, the streamed products, the values
            # loaded ahead and the warps a block (row_step's switches)
            for barrier, prefetch, stream, ahead, warps, merge in (
                    (0, 1, 0, 8, 8, 0), (0, 0, 0, 8, 8, 0), (1, 1, 0, 8, 8, 0),
                    (0, 1, 4, 8, 8, 0), (0, 1, 2, 8, 8, 0), (0, 1, 0, 0, 8, 0),
                    (0, 1, 4, 0, 8, 0), (0, 1, 0, 8, 12, 0), (0, 1, 0, 8, 16, 0),
                    (0, 1, 0, 8, 8, 1), (0, 1, 0, 8, 16, 1)):
                used = rs.shared_bytes(getattr(mx, dtype), hidden, dim, n_q, inter, layers,
                                       norms, warps)
                if used > rs.SHARED_BYTES:
                    continue
                consts = [("K", hidden), ("D", dim), ("NQ", n_q), ("NKV", n_kv),
                          ("INTER", inter), ("L", layers),
                          ("NP", len(rs.layer_input_names(norms))), ("QKN", int(norms)),
                          ("MAXS", rs.MAX_SPLITS), ("KS", rs.KEYS_A_SPLIT),
                          ("LD", rs.LOADS), ("SKIP", 0),
                          ("BAR", barrier), ("PF", prefetch), ("STREAM", stream),
                          ("VA", ahead), ("W", warps), ("MG", merge)]
                yield (f"row_step {dtype:8s} {model:12s} bar{barrier} pf{prefetch} "
                       f"stream{stream} va{ahead} w{warps} mg{merge} smem {used}",
                       wrap(rs.source(layers, norms), ctype, consts,
                            rs.input_names(layers, norms)))


def main() -> int:
    # a stack frame is allowed: cosf / sinf's slow path, once a launch
    return compile_all(compiles(), allowed_stack=True)


if __name__ == "__main__":
    sys.exit(main())
