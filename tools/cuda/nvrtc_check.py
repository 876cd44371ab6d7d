"""Compile a batchlab CUDA kernel body offline (no GPU): NVRTC from PyPI, sm_90.

The H200's device time is scarce; a kernel that does not compile costs a machine start.
This wraps a ``mx.fast.cuda_kernel`` source the way MLX does in outline (its header, a
``__global__`` function taking each input, its ``_shape`` array and each output) and
compiles it with NVRTC for ``sm_90`` at the template values given, printing the log.
What it cannot see: MLX's own header (``utils.cuh``) beyond the bf16/fp16 types.

    python3 -m venv /tmp/nvrtc && /tmp/nvrtc/bin/pip install nvidia-cuda-nvrtc-cu12 \
        nvidia-cuda-runtime-cu12
    /tmp/nvrtc/bin/python tools/cuda/nvrtc_check.py   # from the project root
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import site
import sys


def _find(pattern: str) -> str:
    for root in site.getsitepackages():
        hits = sorted(glob.glob(os.path.join(root, pattern)))
        if hits:
            return hits[0]
    sys.exit(f"not found: {pattern} (pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12)")


def compile_kernel(source: str, header: str, inputs: list[str], outputs: list[str],
                   template: dict[str, str], input_types: dict[str, str] | None = None,
                   output_types: dict[str, str] | None = None) -> tuple[bool, str]:
    """Compile for sm_90 (ptxas verbose: the log gives registers and spills); inputs and
    outputs are ``T`` unless ``input_types`` / ``output_types`` name another type."""
    input_types, output_types = input_types or {}, output_types or {}
    lib = ctypes.CDLL(_find("nvidia/cuda_nvrtc/lib/libnvrtc.so.*"))
    include = os.path.dirname(_find("nvidia/cuda_runtime/include/cuda_bf16.h"))
    consts = "\n".join(f"constexpr auto {k} = {v};" if k != "T" else f"using T = {v};"
                       for k, v in template.items())
    # as MLX does: an input's _ndim only where the source reads it
    params = ", ".join([p for n in inputs for p in [f"const {input_types.get(n, 'T')}* {n}",
                                                    f"const int* {n}_shape"]
                        + ([f"const int {n}_ndim"] if f"{n}_ndim" in source else [])]
                       + [f"{output_types.get(n, 'T')}* {n}" for n in outputs])
    text = (f"#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n{header}\n{consts}\n"
            f'extern "C" __global__ void probe_kernel({params}) {{\n{source}\n}}\n')
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), text.encode(), b"probe.cu", 0, None, None)
    opts = [b"--gpu-architecture=sm_90", b"-I" + include.encode(), b"--std=c++17",
            b"--ptxas-options=-v"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    return rc == 0, log.value.decode(errors="replace")


def _module(path: str):
    spec = importlib.util.spec_from_file_location("kernel_src", path)
    module = importlib.util.module_from_spec(spec)
    # the kernel module imports mlx; only its source strings are needed here
    sys.modules.setdefault("mlx", type(sys)("mlx"))
    core = type(sys)("mlx.core")
    core.Dtype = object
    core.array = object
    sys.modules.setdefault("mlx.core", core)
    sys.modules["kernel_src"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _report(name: str, result: tuple[bool, str]) -> bool:
    ok, log = result
    usage = [line.strip() for line in log.splitlines() if "registers" in line or "spill" in line]
    print(f"{name}: {'compiled' if ok else 'FAILED'}  {' | '.join(usage)}")
    if not ok:
        print(log)
    return ok


def main() -> int:
    rg = _module("batchlab/engine/kernels/row_gemm.py")

    def compile_row_gemm(source: str, header: str, *args, **kwargs) -> tuple[bool, str]:
        # the text MLX is given: compacted (row_gemm._kernel)
        return compile_kernel(rg.compact(source), rg.compact(header), *args, **kwargs)

    shapes = [rg.TILED, *rg.CANDIDATE_TILED]
    ok_all = True
    for ctype, bf16 in (("__nv_bfloat16", "true"), ("__half", "false")):
        for split in {rg._tiling(m) for m in (1, 9, 32, 256)} | set(rg.CANDIDATE_SPLIT):
            tpl = {"T": ctype, "BF16": bf16, "CW": split.cw, "NF": split.nf, "MT": split.mt,
                   "U": split.u, "XB": str(split.xb).lower()}
            ok_all &= _report(f"row_gemm {ctype} {split}", compile_row_gemm(
                rg._SOURCE, rg._HEADER, ["x", "w"], ["out"], tpl))
        for tiled in shapes:
            tpl = {"T": ctype, "BF16": bf16, "WM": tiled.wm, "WN": tiled.wn, "MT": tiled.mt,
                   "NF": tiled.nf, "ST": tiled.stages, "KS": tiled.ks, "SS": tiled.ss}
            header = rg._HEADER + rg._launch_bounds(tiled.threads, tiled.min_blocks)
            out_type = {"out": "float"} if tiled.ks > 1 else {}
            source = rg._CLASS_WARPS_SOURCE if tiled.class_warps else rg._TILED_SOURCE
            ok_all &= _report(f"row_gemm tiled {ctype} {tiled}", compile_row_gemm(
                source, header, ["x", "w"], ["out"], tpl, output_types=out_type))
        ok_all &= _report(f"row_gemm combine {ctype}", compile_row_gemm(
            rg._COMBINE_SOURCE, rg._HEADER, ["part"], ["out"], {"T": ctype},
            input_types={"part": "float"}))
        for three in ("true", "false"):  # the grouped kernels (q/k/v, gate/up)
            split = {"CW": 2, "NF": 2, "MT": 4, "U": 2, "XB": "true"}
            t = rg.TILED
            tiled = {"WM": t.wm, "WN": t.wn, "MT": t.mt, "NF": t.nf, "ST": t.stages, "KS": 1,
                     "SS": t.ss}
            c = rg.CANDIDATE_CLASS_WARPS[0]
            class_warps = {"WM": c.wm, "WN": c.wn, "MT": c.mt, "NF": c.nf, "ST": c.stages,
                           "KS": 1}
            for name, src, tpl, header in (
                    ("split", rg._SOURCE, split, rg._HEADER),
                    ("tiled", rg._TILED_SOURCE, tiled,
                     rg._HEADER + rg._launch_bounds(t.threads, t.min_blocks)),
                    ("class warps", rg._CLASS_WARPS_SOURCE, class_warps,
                     rg._HEADER + rg._launch_bounds(c.threads, c.min_blocks))):
                label = f"row_gemm grouped {name} {ctype} THREE={three}"
                ok_all &= _report(label, compile_row_gemm(
                    rg.grouped_source(src), header, ["x", "w0", "w1", "w2"], ["out"],
                    {"T": ctype, "BF16": bf16, "THREE": three, **tpl}))
    print("NVRTC OK" if ok_all else "NVRTC FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
