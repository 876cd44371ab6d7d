"""Issue 28, item 3: why the looped decode kernel reads KV at ~1.2 TB/s. Runs the kernel at
llama-3.1-8b's heads (B=256, 192 keys) as the default (W = 16), with the ring (W = 8,
R = 4) and staged (W = 32), three calls each, for Nsight Compute's warp-state, scheduler,
occupancy and memory sections (s30-stalls.sh):

    ncu --section WarpStateStats --section SchedulerStats --section Occupancy \\
        --section MemoryWorkloadAnalysis -k regex:batchlab python3 tools/h200/stall_probe.py
"""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.kernels import grouped_decode as gd

B, HQ, HKV, D, KEYS = 256, 32, 8, 128, 192
VARIANTS = (("default", {}), ("ring W8/R4", {"layout": "looped", "warps": 8, "ring": 4}),
            ("staged W32", {"layout": "looped", "warps": 32, "stage": True}))

if __name__ == "__main__":
    mx.random.seed(0)
    q = mx.random.normal((B, HQ, 1, D)).astype(mx.bfloat16)
    kbuf = mx.random.normal((B, HKV, 256, D)).astype(mx.bfloat16)
    vbuf = mx.random.normal((B, HKV, 256, D)).astype(mx.bfloat16)
    mx.eval(q, kbuf, vbuf)
    k, v = kbuf[:, :, :KEYS], vbuf[:, :, :KEYS]
    for name, kw in VARIANTS:
        for _ in range(3):
            mx.eval(gd.grouped_decode_attention(q, k, v, D ** -0.5, **kw))
        mx.synchronize()
        print(f"{name}: 3 calls", flush=True)
