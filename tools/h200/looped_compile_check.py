"""Compile the grouped decode kernel's layouts with NVRTC as ``mx.fast.cuda_kernel`` would
(no GPU needed): every template combination ``grouped_decode.fits`` admits, for sm_90a,
then ``ptxas -v`` on the PTX for registers, spills and stack where ptxas is at hand.

``mx.fast.cuda_kernel`` (mlx/backend/cuda/custom_kernel.cpp) writes the header, then
``__global__ void name(const T* q, Shape q_shape, Strides q_strides, ..., T* out)`` with
the template arguments as ``constexpr int`` / ``using`` lines at the top of the body,
then the source; here ``Shape`` / ``Strides`` are stand-ins for MLX's (int32 / int64
arrays of 8), passed only where the source names them, as MLX does.

    python3 tools/h200/looped_compile_check.py [--layouts simple,staged,looped]
        [--nvrtc /path/libnvrtc.so.12] [--include DIR] [--ptxas /path/ptxas]

Defaults look for the pip wheels nvidia-cuda-nvrtc-cu12 / -runtime-cu12 / -nvcc-cu12
under /tmp/nvrtc (``python3 -m venv /tmp/nvrtc && /tmp/nvrtc/bin/pip install
nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12``). Exit status 0
when everything compiled (and, with ptxas, nothing spilled or used a stack frame).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import re
import subprocess
import sys
import tempfile

from batchlab.engine.kernels import grouped_decode as gd
from batchlab.engine.kernels import grouped_decode_looped as looped
from batchlab.engine.kernels import grouped_decode_staged as staged
from batchlab.engine.kernels import grouped_decode_tiled as tiled
from batchlab.engine.kernels import row_attention_gqa as row_gqa

CUDA_TYPES = {"float16": ("__half", 2), "bfloat16": ("__nv_bfloat16", 2),
              "float32": ("float", 4)}
PRELUDE = """
#include <cuda_fp16.h>
#include <cuda_bf16.h>
struct Shape { int v[8]; __device__ int operator[](int i) const { return v[i]; } };
struct Strides { long long v[8];
    __device__ long long operator[](int i) const { return v[i]; } };
"""


def find(pattern: str) -> str | None:
    hits = sorted(glob.glob(pattern, recursive=True))
    return hits[0] if hits else None


# each input's C type: the model's dtype, or these
INPUT_TYPES = {"scale": "float", "first_keys": "int", "sinks": "float"}


def wrap(name: str, header: str, source: str, ctype: str,
         consts: list[tuple[str, int]], outputs: tuple[str, ...] = ("out",),
         inputs: tuple[str, ...] = ("q", "k", "v", "scale")) -> str:
    params = []
    for arg in inputs:
        params.append(f"const {INPUT_TYPES.get(arg, ctype)}* {arg}")
        if f"{arg}_shape" in source:
            params.append(f"const __grid_constant__ Shape {arg}_shape")
        if f"{arg}_strides" in source:
            params.append(f"const __grid_constant__ Strides {arg}_strides")
    params += [f"{ctype if o == 'out' else 'float'}* {o}" for o in outputs]
    body = f"  using T = {ctype};\n" + "".join(f"  constexpr int {k} = {v};\n" for k, v in consts)
    return (PRELUDE + header + "namespace mlx::core::cu {\n\n"
            f"__global__ void {name}(\n    " + ",\n    ".join(params) + ") {\n"
            + body + "\n" + source + "\n}\n\n} // namespace mlx::core::cu\n")


class Nvrtc:
    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)

    def ptx(self, src: str, opts: list[str]) -> tuple[bool, str, str]:
        lib, prog = self.lib, ctypes.c_void_p()
        assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0,
                                      None, None) == 0
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(max(1, size.value))
        lib.nvrtcGetProgramLog(prog, log)
        ptx = ""
        if rc == 0:
            lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetPTX(prog, buf)
            ptx = buf.value.decode()
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        return rc == 0, log.value.decode(errors="replace"), ptx


def ptxas_usage(ptxas: str, ptx: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as fh:
            fh.write(ptx)
        run = subprocess.run([ptxas, "-arch=sm_90a", "-v", "-O3", path, "-o",
                              os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
        text = run.stdout + run.stderr
    if run.returncode:
        return "PTXAS FAILED " + text.strip().replace("\n", " | ")[:300]
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    stack = re.search(r"(\d+) bytes stack frame", text)
    smem = re.search(r"(\d+) bytes smem", text)
    return (f"regs {regs.group(1) if regs else '?'} "
            f"stack {stack.group(1) if stack else '?'} "
            f"spill {spill.group(1) + '/' + spill.group(2) if spill else '?'} "
            f"smem {smem.group(1) if smem else 0}")


def compile_and_report(nv: Nvrtc, opts: list[str], ptxas: str | None, compiles,
                       allowed_stack: bool = False) -> tuple[int, int, int]:
    """Compile each (tag, source), print its registers, spills and stack, and return
    (compiled, failed, spilled or with a stack frame, unless ``allowed_stack``)."""
    failures = spills = total = 0
    clean = r"spill 0/0" if allowed_stack else r"stack 0 spill 0/0"
    for tag, src in compiles:
        ok, log, ptx = nv.ptx(src, opts)
        total += 1
        if not ok:
            failures += 1
            print(f"{tag}: COMPILE FAILED\n{log[:3000]}", flush=True)
            continue
        usage = ptxas_usage(ptxas, ptx) if ptxas else "ptx ok (no ptxas)"
        bad = bool(ptxas) and ("FAILED" in usage or not re.search(clean, usage))
        spills += bad
        print(f"{tag}: {usage}{'  <-- SPILLS / STACK' if bad else ''}", flush=True)
    return total, failures, spills


def compile_all(compiles, allowed_stack: bool = False) -> int:
    """A check's ``main``: NVRTC, the headers and ptxas from the pip wheels under
    /tmp/nvrtc, every (tag, source) of ``compiles`` for sm_90a, the totals; the exit
    status (0: all compiled, nothing spilled, no stack frame unless ``allowed_stack``)."""
    nvrtc = find("/tmp/nvrtc/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
    include = find("/tmp/nvrtc/lib/python3*/site-packages/nvidia/cuda_runtime/include")
    ptxas = find("/tmp/nvrtc/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas")
    if not nvrtc or not include:
        print("NVRTC or the CUDA headers not found (looped_compile_check.py's docstring)")
        return 2
    opts = ["--gpu-architecture=compute_90a", "--std=c++17", f"-I{include}"]
    total, failures, spills = compile_and_report(Nvrtc(nvrtc), opts, ptxas, compiles,
                                                 allowed_stack)
    print(f"{total} compiled, {failures} failed, {spills} with spills, "
          f"{'' if allowed_stack else 'a stack frame '}or ptxas failures")
    return 0 if failures == 0 and spills == 0 else 1


def combos():
    """(dtype, D, G) as ``fits`` admits them: G * D / 32 <= MAX_STATE."""
    for dtype in CUDA_TYPES:
        for dim in gd.HEAD_DIMS:
            for group in (1, 2, 3, 4, 5, 6, 8):
                if group * (dim // 32) <= gd.MAX_STATE:
                    yield dtype, dim, group


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layouts", default="simple,staged,looped,tiled,row-gqa",
                    help="row-gqa: the invariant path's GQA row kernel, at each unroll")
    ap.add_argument("--nvrtc", default=find("/tmp/nvrtc/lib/python3*/site-packages/nvidia/"
                                            "cuda_nvrtc/lib/libnvrtc.so.12"))
    ap.add_argument("--include", default=find("/tmp/nvrtc/lib/python3*/site-packages/nvidia/"
                                              "cuda_runtime/include"))
    ap.add_argument("--ptxas", default=find("/tmp/nvrtc/lib/python3*/site-packages/nvidia/"
                                            "cuda_nvcc/bin/ptxas"))
    ap.add_argument("--warps", default=",".join(str(w) for w in looped.WARP_CHOICES))
    ap.add_argument("--unroll", default="", help="looped U to try instead of unroll()")
    ap.add_argument("--prefetch", default="0,1", help="looped P (L2 prefetch) to compile")
    ap.add_argument("--split", default="0,1", help="looped H (split head sums) to compile "
                    "(1 only where looped.can_split)")
    ap.add_argument("--ring", default="0,4", help="looped R to compile (0: no ring; "
                    "ring_slots() turns down what a block cannot hold)")
    args = ap.parse_args()
    if not args.nvrtc or not args.include:
        print("NVRTC or the CUDA headers not found (see the docstring)")
        return 2
    nv = Nvrtc(args.nvrtc)
    opts = ["--gpu-architecture=compute_90a", "--std=c++17", f"-I{args.include}"]
    counts = [0, 0, 0]  # compiled, failed, with spills or a stack frame
    for layout in args.layouts.split(","):
        for dtype, dim, group in combos():
            ctype, size = CUDA_TYPES[dtype]
            pow2 = group & (group - 1) == 0
            if layout == "staged" and not pow2:
                continue
            compiles = []  # (tag, source) of each template combination
            if layout == "tiled":
                for warps, partial in ((w, p) for w in (tiled.WARPS, tiled.FEW_BLOCK_WARPS)
                                       for p in (False, True)):
                    consts = [("D", dim), ("G", group), ("NW", warps),
                              ("TILE", tiled.TILE), ("KL", tiled.KEY_LOADS),
                              ("VL", tiled.VALUE_LOADS)]
                    outputs = ("part_m", "part_l", "part_acc") if partial else ("out",)
                    compiles.append((
                        f"tiled  {dtype:8s} D={dim:3d} G={group} W={warps} "
                        f"partial={int(partial)}",
                        wrap("k_tiled", tiled.HEADER,
                             tiled.SOURCE_PARTIAL if partial else tiled.SOURCE_ONE,
                             ctype, consts, outputs)))
                variants = []
            elif layout == "row-gqa":
                for keys_ahead, sinks in ((u, h) for u in row_gqa.UNROLL_CHOICES
                                          for h in (0, 1)):
                    maxd = 32 * -(-dim // 32)
                    if group < 2 or not row_gqa.fits(group * 2, 2, maxd):
                        continue
                    consts = [("MAXD", maxd), ("NW", row_gqa.WARPS), ("G", group),
                              ("HAS_SINKS", sinks), ("U", keys_ahead)]
                    compiles.append((
                        f"row-gqa {dtype:8s} D={dim:3d} G={group} U={keys_ahead} "
                        f"sinks={sinks}",
                        wrap("k_row_gqa", row_gqa._HEADER, row_gqa._SOURCE, ctype, consts,
                             inputs=("q", "k", "v", "first_keys", "scale", "sinks"))))
                variants = []
            elif layout == "looped":
                warps_list = [int(x) for x in args.warps.split(",")]
                def rings(w, group=group, dim=dim, size=size):
                    return sorted({looped.ring_slots(group, dim, size, w, int(r))
                                   for r in args.ring.split(",")})
                splits = sorted({int(h) and looped.can_split(group)
                                 for h in args.split.split(",")})
                variants = [(w, u, p, r, h) for w in warps_list
                            for u in ([int(u) for u in args.unroll.split(",")]
                                      if args.unroll else [looped.unroll(group, dim, w)])
                            for p in (int(x) for x in args.prefetch.split(","))
                            for r in rings(w) for h in splits]
            else:
                variants = [(32, staged.SLOTS if layout == "staged"
                             else gd.unroll(group, dim, size), 0, 0, 0)]
            for warps, unroll, prefetch, ring, split in variants:
                consts = [("D", dim), ("G", group)]
                if layout == "looped":
                    consts.append(("W", warps))
                    header, source = looped.bounds(warps) + gd._HELPERS, looped.SOURCE
                    shared = (looped.shared_bytes(group, dim)
                              + looped.ring_bytes(dim, size, warps, ring))
                elif layout == "staged":
                    header, source = gd._HEADER, staged.SOURCE
                    shared = staged.shared_bytes(dim, size)
                else:
                    header, source, shared = gd._HEADER, gd._SOURCE, 0
                consts.append(("U", unroll))
                if layout == "looped":
                    consts += [("P", prefetch), ("R", ring), ("S", 0), ("H", int(split))]
                compiles.append((
                    f"{layout:6s} {dtype:8s} D={dim:3d} G={group} W={warps:2d} U={unroll} "
                    f"P={prefetch} R={ring} H={int(split)} dyn-smem {shared:6d}",
                    wrap(f"k_{layout}", header, source, ctype, consts)))
            counts = [a + b for a, b in zip(counts, compile_and_report(
                nv, opts, args.ptxas, compiles), strict=True)]
    total, failures, spills = counts
    print(f"{total} compiled, {failures} failed, {spills} with spills, a stack frame or "
          "ptxas failures")
    return 0 if failures == 0 and spills == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
