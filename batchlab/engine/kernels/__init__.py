"""Kernels a path runs in place of MLX's ops, mostly ``mx.fast.cuda_kernel``s for CUDA.

    attention_dispatch.py    where a model's attention call goes (mlx-lm's helper or ours)
    grouped_decode*.py       fast's decode attention, each KV head read once per query group
    decode_streams.py        what the split-key decode kernels share
    quantized_*.py           the kv paths' attention over the packed cache
    row_attention*.py        the invariant path's decode attention over each row's own keys
    row_prefill.py           the invariant path's batched prefill attention
    row_gemm.py              the invariant path's row-invariant decode GEMM
    row_chain.py             fast's one-row decode layer as four kernels (opt-in)
    row_step.py              fast's one-row decode step, every layer in one persistent kernel
"""
