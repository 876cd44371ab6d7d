"""The zoo: tiny random-weight models of real architectures, one `ZooSpec` each.

A spec is the mlx-lm `ModelArgs` dict of one architecture, shrunk until the CPU CI can run
hundreds of cells on two cores (hidden 64, 2-4 layers, head_dim 16-32, vocab 320), while
keeping every feature that makes batching hard for that family: GQA (>= 2 KV heads),
sliding windows of 8 (so a 24-token run wraps the ring 3x), SSM/conv state, MoE routing,
per-layer inputs and KV sharing. `build.py` adds the boilerplate (`eos_token_id`, dtype).

Any edit to a spec changes its cache directory (`build.spec_hash`) and so fails the pins in
`tests/unit/test_zoo.py`; an edit that changes the weights also changes the fingerprint
that goldens are stamped with, and they go STALE. Treat specs as immutable: `config` is a
plain dict only so it serialises as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Shared by every spec: 256 byte ids + <|bos|> <|eos|> <|pad|>, padded up to a multiple of
# 64 as real vocabularies are (unused ids 259..319 still get embedding rows and logits).
VOCAB_SIZE = 320

_ATTN = {  # the attention shape most families share: 4 query heads over 2 KV heads
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": VOCAB_SIZE,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ZooSpec:
    """One zoo model: `config` is the ModelArgs dict (model_type is added at build)."""

    name: str
    model_type: str
    config: dict = field(hash=False)
    dtype: str  # "bfloat16" where the CPU backend runs the model, else "float32"
    stands_in_for: str
    notes: str = ""

    def __post_init__(self) -> None:
        if self.dtype not in ("bfloat16", "float32"):
            raise ValueError(f"zoo spec {self.name}: dtype {self.dtype!r} is not bfloat16/float32")
        if "model_type" in self.config:
            raise ValueError(f"zoo spec {self.name}: put model_type on the spec, not the config")


def _spec(name: str, model_type: str, dtype: str, stands_in_for: str, notes: str = "", **config):
    return ZooSpec(
        name=name,
        model_type=model_type,
        config=config,
        dtype=dtype,
        stands_in_for=stands_in_for,
        notes=notes,
    )


_LLAMA3_ROPE = {  # Llama 3.1 / 3.2's RoPE scaling, as their checkpoints' configs spell it
    "rope_type": "llama3",
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
}

_GEMMA4 = {  # gemma4_text: 4 layers sliding/full/sliding/full; full layers use wider heads
    **_ATTN,
    "num_hidden_layers": 4,
    "intermediate_size": 128,
    "head_dim": 16,
    "global_head_dim": 32,
    "vocab_size_per_layer_input": VOCAB_SIZE,
    "sliding_window": 8,
    "sliding_window_pattern": 2,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "final_logit_softcapping": 30.0,
}

# A table: one block per spec reads better than ruff's one-argument-per-line layout.
# fmt: off
_SPECS = [
    _spec(
        "llama", "llama", "bfloat16", "Llama 3.x (dense GQA, llama3 RoPE scaling)",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
        rope_scaling=_LLAMA3_ROPE,
    ),
    _spec(
        "llama-flat", "llama", "bfloat16", "Llama with flat bf16 logits (greedy tie rules)",
        notes="vocab 2048, logit std 0.3: top logits near 1 (fine bf16 steps) but logprobs "
              "near -7 (coarse steps), so distinct logits often tie as logprobs and "
              "argmax(logits) != argmax(logprobs), as in real bf16 models (FACTS.md)",
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=2048,
        num_hidden_layers=2, intermediate_size=128, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=False,
        batchlab_logit_std=0.3,
    ),
    _spec(
        "qwen3", "qwen3", "bfloat16", "Qwen3 dense (q/k norm)",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=16, rms_norm_eps=1e-6,
        rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=True,
    ),
    _spec(
        "minicpm", "minicpm", "bfloat16", "CPM / MiniCPM5 (muP scaled embed, depth, lm_head)",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, rms_norm_eps=1e-5,
        dim_model_base=16, scale_depth=1.4, scale_emb=12.0, rope_theta=10000.0,
        max_position_embeddings=4096, tie_word_embeddings=False,
    ),
    _spec(
        "gemma3", "gemma3_text", "bfloat16", "Gemma 3 (sliding/full alternation, ring wrap)",
        notes="window 8, pattern 2: layers 0, 2 slide, 1, 3 are full",
        **_ATTN, num_hidden_layers=4, intermediate_size=128, head_dim=16,
        query_pre_attn_scalar=16, sliding_window=8, sliding_window_pattern=2,
        rope_theta=1000000.0, rope_local_base_freq=10000.0, rms_norm_eps=1e-6,
        max_position_embeddings=32768, tie_word_embeddings=True,
    ),
    _spec(
        "gemma4-12b", "gemma4_text", "bfloat16", "Gemma 4 dense (12B-class rows)",
        notes="sliding + full layers, no per-layer input, no KV sharing",
        **_GEMMA4, hidden_size_per_layer_input=0, num_kv_shared_layers=0,
    ),
    _spec(
        "gemma4-e4b", "gemma4_text", "bfloat16", "Gemma 4 E4B (per-layer input, KV sharing)",
        notes="layers 2, 3 reuse the K/V of layers 0, 1: two caches for four layers",
        **_GEMMA4, hidden_size_per_layer_input=16, num_kv_shared_layers=2,
    ),
    _spec(
        "gemma4-26b", "gemma4_text", "float32", "Gemma 4 26B-A4B (MoE block, K=V full layers)",
        notes="float32: GatherMM (MoE) runs fp32-only on the CPU backend",
        **_GEMMA4, hidden_size_per_layer_input=0, num_kv_shared_layers=0,
        enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
        attention_k_eq_v=True, num_global_key_value_heads=2,
    ),
    _spec(
        "qwen3-moe", "qwen3_moe", "float32", "Qwen3 MoE (30B-A3B class)",
        notes="float32: GatherMM (MoE) runs fp32-only on the CPU backend",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=16, num_experts=4,
        num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
        moe_intermediate_size=32, norm_topk_prob=True, rms_norm_eps=1e-6,
        rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=False,
    ),
    _spec(
        "gpt-oss", "gpt_oss", "float32", "gpt-oss (sliding/full, sinks, MoE, yarn RoPE)",
        notes="float32: GatherMM (MoE) runs fp32-only on the CPU backend",
        **_ATTN, num_hidden_layers=2, intermediate_size=32, head_dim=16,
        num_local_experts=4, num_experts_per_tok=2, sliding_window=8, rms_norm_eps=1e-5,
        layer_types=["sliding_attention", "full_attention"], rope_theta=150000.0,
        rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                      "beta_slow": 1.0, "original_max_position_embeddings": 4096},
    ),
    _spec(
        "qwen3.5", "qwen3_5", "bfloat16", "Qwen3.5 (GatedDeltaNet 3:1 hybrid)",
        notes="layers 0-2 GatedDeltaNet (conv + delta state), layer 3 gated full attention",
        **_ATTN, num_hidden_layers=4, full_attention_interval=4, intermediate_size=128,
        head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
        rms_norm_eps=1e-6, max_position_embeddings=262144, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                         "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10]},
    ),
    _spec(
        "mamba2", "mamba2", "bfloat16", "Mamba-2 (pure SSM)",
        notes="state_size 32: Metal's ssm kernel needs a multiple of 32",
        hidden_size=64, num_heads=4, head_dim=32, n_groups=1, state_size=32,
        num_hidden_layers=2, intermediate_size=128, conv_kernel=4, use_bias=False,
        use_conv_bias=True, time_step_rank=4, time_step_limit=[0.001, 100.0],
        layer_norm_epsilon=1e-5, vocab_size=VOCAB_SIZE, tie_word_embeddings=True,
    ),
    _spec(
        "lfm2", "lfm2", "bfloat16", "LFM2 (short-conv + attention hybrid)",
        notes="layers conv/attn/conv/attn; short conv state of 2 tokens",
        **_ATTN, num_hidden_layers=4, max_position_embeddings=128000, norm_eps=1e-5,
        conv_bias=False, conv_L_cache=3, block_dim=64, block_ff_dim=128,
        block_multiple_of=16, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True,
        layer_types=["conv", "full_attention", "conv", "full_attention"], rope_theta=1000000.0,
    ),
    _spec(
        "falcon-h1", "falcon_h1", "bfloat16", "Falcon-H1 (parallel Mamba-2 + attention per layer)",
        notes="every layer's cache is a CacheList(ArraysCache, KVCache): the only family "
              "whose layers hold two caches",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=16,
        mamba_d_conv=4, mamba_d_head=16, mamba_d_ssm=64, mamba_d_state=32, mamba_expand=1,
        mamba_n_groups=1, mamba_n_heads=4, mamba_chunk_size=16, rms_norm_eps=1e-5,
        rope_theta=100000.0, max_position_embeddings=4096, tie_word_embeddings=False,
        lm_head_multiplier=1.0,  # the real 0.039 flattens a random head's logits to ties
    ),
    _spec(
        "baichuan-m1", "baichuan_m1", "bfloat16", "Baichuan-M1 (conv + sliding/full attention per layer)",
        notes="CacheList(ArraysCache, RotatingKVCache) on layer 0 (window 8), "
              "CacheList(ArraysCache, KVCache) on layer 1",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, rope_theta=10000.0,
        sliding_window=8, sliding_window_layers=[0], conv_window=2, rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
    # The GPU's fused decode attention (CUDA's sdpa_vector) takes head_dim 64, 96, 128 or
    # 256 only; every model above has 16 or 32, so on a GPU they all run the unfused
    # fallback, masked or not. These two give the GPU gates the real models' kernels.
    _spec(
        "llama-hd64", "llama", "bfloat16", "Llama-3.2-1B attention (head_dim 64: fused GPU kernels)",
        notes="4 query heads of 64 over 2 KV heads; else the tiny llama",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=64, rms_norm_eps=1e-5,
        rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
        rope_scaling=_LLAMA3_ROPE,
    ),
    _spec(
        "qwen3-hd128", "qwen3", "bfloat16", "Qwen3-0.6B / Llama-3.1-8B attention (head_dim 128)",
        notes="4 query heads of 128 over 2 KV heads, q/k norm; else the tiny qwen3",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=128, rms_norm_eps=1e-6,
        rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=True,
    ),
    # Quantized KV (mx.quantize groups of 32, 64 or 128) needs head_dim >= 32: the
    # sliding-window family's stand-in for the kv paths.
    _spec(
        "gemma3-hd64", "gemma3_text", "bfloat16", "Gemma 3 attention (head_dim 64: quantized KV)",
        notes="window 8, pattern 2 as the tiny gemma3, 4 query heads of 64 over 2 KV heads",
        **_ATTN, num_hidden_layers=4, intermediate_size=128, head_dim=64,
        query_pre_attn_scalar=64, sliding_window=8, sliding_window_pattern=2,
        rope_theta=1000000.0, rope_local_base_freq=10000.0, rms_norm_eps=1e-6,
        max_position_embeddings=32768, tie_word_embeddings=True,
    ),
    # Float32 KV (MoE runs fp32 on the CPU backend): the quantized paths' packed layout
    # holds fp32 scales and biases (two uint32 words per group, not one), which no bf16
    # model reaches; the real model has fp32 KV too, but a step of it costs ~0.3 s here.
    _spec(
        "qwen3-moe-hd64", "qwen3_moe", "float32", "Qwen3 MoE attention (head_dim 64, float32 KV)",
        notes="float32: GatherMM (MoE) runs fp32-only on the CPU backend; 4 query heads of "
              "64 over 2 KV heads; else the tiny qwen3-moe",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=64, num_experts=4,
        num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
        moe_intermediate_size=32, norm_topk_prob=True, rms_norm_eps=1e-6,
        rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=False,
    ),
    _spec(
        "gemma2-gqa", "gemma2", "bfloat16", "Gemma 2 with GQA (known mlx-lm batch-mode bug)",
        notes="4 heads over 2 KV heads: mlx-lm's (B,1,L,S) mask meets its 5-D GQA scores; "
        "B == 2 (== KV heads) with ragged rows gives wrong logits, other B > 1 crash",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=16,
        query_pre_attn_scalar=16.0, rms_norm_eps=1e-6, rope_theta=10000.0,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
    ),
    # A config that names no head_dim (mlx-lm's llama then takes hidden / heads) and a head
    # dim that is not a power of two: the quantized paths read both (``head_dims``: group
    # 32 splits 96, group 64 does not, and only the rotated scheme needs a power of two).
    _spec(
        "llama-hd96", "llama", "bfloat16", "a llama config without head_dim (head dim 96)",
        notes="2 query heads of 192 / 2 = 96 over 1 KV head; no head_dim key in its config; "
              "one layer, to stay tiny at hidden 192",
        hidden_size=192, num_attention_heads=2, num_key_value_heads=1, vocab_size=VOCAB_SIZE,
        num_hidden_layers=1, intermediate_size=64, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=True,
    ),
    # A 4-bit checkpoint (mlx-lm's affine quantization at group 32, as the real model's
    # Q4_1 weights load): every projection and the tied head are QuantizedLinear /
    # QuantizedEmbedding, so the gate reaches quantized weights under batching (the
    # invariant path's blocked projections wrap them) at the zoo's cost, not the real
    # model's (~0.1 s a token through the CPU's quantized matmul).
    _spec(
        "llama-q4", "llama", "bfloat16", "a 4-bit llama checkpoint (quantized weights)",
        notes="llama's shape; Linear and Embedding weights quantized at build "
              "(weights.quantized_weights: 4 bits, group 32, bfloat16 scales)",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
        quantization={"group_size": 32, "bits": 4},
    ),
    # mlx-lm's SwitchMLP (not SwitchGLU) experts: Nemotron-H's MoE blocks, between a
    # Mamba-2 block and an attention block; the invariant path swaps in its unsorted copy.
    _spec(
        "nemotron-h", "nemotron_h", "float32", "Nemotron-H (Mamba-2 + attention + SwitchMLP MoE)",
        notes="blocks M * E: Mamba-2 (4 heads of 16), attention (4 over 2 KV heads), MoE (4 "
              "routed SwitchMLP experts, top-2, one shared); float32: GatherMM on the CPU",
        **_ATTN, intermediate_size=128, max_position_embeddings=4096, attention_bias=False,
        mamba_num_heads=4, mamba_head_dim=16, mamba_proj_bias=False, ssm_state_size=16,
        conv_kernel=4, n_groups=1, mlp_bias=False, layer_norm_epsilon=1e-5, use_bias=False,
        use_conv_bias=True, hybrid_override_pattern=["M", "*", "E"], head_dim=16,
        moe_intermediate_size=32, n_routed_experts=4, n_group=1, topk_group=1,
        num_experts_per_tok=2, norm_topk_prob=True, routed_scaling_factor=1.0,
        n_shared_experts=1, moe_shared_expert_intermediate_size=32,
    ),
    # Multi-head latent attention (MLA): the KV cache holds one "head" whose keys are the
    # normalised latent (kv_lora_rank wide) and whose values are the RoPE'd key part
    # (qk_rope_head_dim wide), so keys and values differ in width; the mask reaches the
    # model as additive scores (``where(mask, pe_scores, min)``). Dense MLP: no routed
    # experts, so it runs in bfloat16.
    _spec(
        "deepseek-v3", "deepseek_v3", "bfloat16", "DeepSeek-V3 / V2-Lite attention (MLA latent KV)",
        notes="2 layers, 4 heads; KV cache keys (B,1,L,32) latent, values (B,1,L,8) k_pe; "
              "q_lora_rank none (V2-Lite's plain q_proj); dense MLP (no n_routed_experts)",
        hidden_size=64, num_attention_heads=4, num_key_value_heads=4, vocab_size=VOCAB_SIZE,
        num_hidden_layers=2, intermediate_size=128, kv_lora_rank=32, q_lora_rank=None,
        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=None,
        rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=4096,
    ),
    # Kimi Linear: Kimi Delta Attention layers whose ArraysCache holds FOUR arrays (the q, k
    # and v short-conv states and the delta-rule state), beside an MLA layer (latent KV,
    # no RoPE). Dense MLP (num_experts 0), so it runs in bfloat16.
    _spec(
        "kimi-linear", "kimi_linear", "bfloat16", "Kimi Linear (KDA 4-array state + MLA hybrid)",
        notes="layers KDA/KDA/MLA; a KDA cache is ArraysCache(4): conv q, k, v states "
              "(B,3,64) and the delta state (B,4,16,16); the MLA cache keys (B,1,L,32), "
              "values (B,1,L,8)",
        hidden_size=64, num_attention_heads=4, num_key_value_heads=4, vocab_size=VOCAB_SIZE,
        num_hidden_layers=3, intermediate_size=128, head_dim=16, rope_theta=10000.0,
        rms_norm_eps=1e-6, model_max_length=4096, num_experts=0, moe_intermediate_size=32,
        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        tie_word_embeddings=False,
        linear_attn_config={"kda_layers": [1, 2], "num_heads": 4, "head_dim": 16,
                            "short_conv_kernel_size": 4},
    ),
    # RWKV-7: no attention at all; each layer's ArraysCache holds THREE arrays, set by two
    # modules (time mixing: the token-shift input and the (H, D, D) wkv state; channel
    # mixing: its own token-shift input). It reads no mask: mlx-lm's batch mode folds a
    # ragged prompt's right padding into the shorter rows' state (ORACLE-BUG cells).
    _spec(
        "rwkv7", "rwkv7", "bfloat16", "RWKV-7 (3-array recurrent state, no mask)",
        notes="2 layers, 4 heads of 16; cache arrays (B,1,64) shift, (B,4,16,16) wkv state, "
              "(B,1,64) ffn shift; ragged batches are wrong in mlx-lm's batch mode",
        hidden_size=64, vocab_size=VOCAB_SIZE, num_hidden_layers=2, intermediate_size=128,
        head_dim=16, norm_eps=1e-5, a_low_rank_dim=8, v_low_rank_dim=8, gate_low_rank_dim=8,
        decay_low_rank_dim=8, tie_word_embeddings=False,
    ),
    # ==== zoo3: attention that depends on what batching changes: the position (RoPE
    # variants and attention scales keyed on it, read from per-row offsets) and the head
    # layout (query heads per KV head). Appended as a block so other branches' specs merge.
    # Ministral 3: yarn RoPE and llama4-style attention temperature, queries scaled by
    # 1 + beta * log(1 + floor(position / original_max)), computed once per forward from
    # layer 0's cache offset (a ring here): original_max 8, so a cell's rows cross
    # positions 8, 16 and 24 at different steps; sliding layer 0 (window 8), full layer 1.
    _spec(
        "ministral3", "ministral3", "bfloat16", "Ministral 3 (yarn, position-keyed attention scale)",
        notes="layers sliding8/full; queries x (1 + 0.1 log(1 + floor(pos / 8))), pos from "
              "cache[0].offset per row; yarn factor 16 over original_max 8",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=16, rms_norm_eps=1e-5,
        max_position_embeddings=128, tie_word_embeddings=True, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
                         "original_max_position_embeddings": 8, "beta_fast": 32.0,
                         "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "llama_4_scaling_beta": 0.1},
    ),
    # Head layouts: every model above groups 2 query heads per KV head (llama-hd96: 2 over
    # 1); kernels that fold the group into rows (the fast path's grouped decode attention,
    # the invariant row kernels) see G=4 and G=8 (MQA) only here.
    _spec(
        "llama-g4", "llama", "bfloat16", "Llama 3 8B/70B head grouping (G=4: 8 query heads over 2 KV)",
        notes="8 query heads of 16 over 2 KV heads; else the tiny llama (no rope scaling)",
        hidden_size=64, num_attention_heads=8, num_key_value_heads=2, vocab_size=VOCAB_SIZE,
        num_hidden_layers=2, intermediate_size=128, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
    ),
    _spec(
        "qwen3-mqa", "qwen3", "bfloat16", "multi-query attention (G=8: 8 query heads over 1 KV)",
        notes="8 query heads of 64 over one KV head, q/k norm; head_dim 64 so the quantized "
              "KV paths (groups of 64) and the GPU's fused decode kernels take it",
        hidden_size=64, num_attention_heads=8, num_key_value_heads=1, vocab_size=VOCAB_SIZE,
        num_hidden_layers=2, intermediate_size=128, head_dim=64, rms_norm_eps=1e-6,
        rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=True,
    ),
    # Phi-3: longrope (SuScaledRoPE: per-frequency factors and an mscale on the rotated
    # part), partial rotary (8 of 16 dims), one fused qkv projection. HF picks short or
    # long factors by the sequence length; mlx-lm 0.32.2 always uses the long ones, so no
    # row's length picks for another (docs/regimes.md).
    _spec(
        "phi3", "phi3", "bfloat16", "Phi-3 / Phi-4-mini (longrope, partial rotary, fused qkv)",
        notes="4 heads of 16 over 2 KV heads, rotary on 8 dims with long factors 1/2/4/8 and "
              "mscale sqrt(2) (64 / original 8)",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, rms_norm_eps=1e-5,
        rope_theta=10000.0, partial_rotary_factor=0.5, max_position_embeddings=64,
        original_max_position_embeddings=8, tie_word_embeddings=False,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.5, 2.0, 2.5],
                      "long_factor": [1.0, 2.0, 4.0, 8.0]},
    ),
    # Dynamic NTK RoPE (llama's rope_scaling "dynamic"): the base grows with the sequence
    # length past max_position_embeddings (16 here: 26-id prompts cross it in prefill, and
    # serve's context limit still takes a 5-id prompt and 8 tokens), computed in Python
    # from the offset.
    # mlx-lm's batch mode passes per-row offsets, and `max(L + offset, 8)` on a (B,)
    # array raises at B > 1: batch-crash ORACLE-BUG cells; B=1 runs.
    _spec(
        "llama-dynamic", "llama", "bfloat16", "Llama / InternLM2 with dynamic NTK RoPE",
        notes="rope_scaling dynamic, factor 4 past 16 positions; mlx-lm's batch mode "
              "crashes at B > 1 (ORACLE-BUG)",
        **_ATTN, num_hidden_layers=2, intermediate_size=128, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=10000.0, max_position_embeddings=16, tie_word_embeddings=True,
        rope_scaling={"type": "dynamic", "factor": 4.0},
    ),
    # Learned absolute positions: the embedding of each row's own position, looked up from
    # the offset. gpt2 per row (``arange(L) + offset[..., None]``); gpt_bigcode (StarCoder
    # 1, SantaCoder) through ``np.arange(offset, offset + L)``, one number: its batch mode
    # raises at B > 1 (ORACLE-BUG), as llama-dynamic's. Both: LayerNorm and biases.
    _spec(
        "gpt2", "gpt2", "bfloat16", "GPT-2 (learned absolute positions per row, LayerNorm, biases)",
        notes="2 layers, 4 heads of 16 (MHA, as GPT-2), 64 learned positions, fused c_attn",
        n_ctx=64, n_embd=64, n_head=4, n_layer=2, n_positions=64, layer_norm_epsilon=1e-5,
        vocab_size=VOCAB_SIZE,
    ),
    _spec(
        "gpt-bigcode", "gpt_bigcode", "bfloat16", "StarCoder 1 / SantaCoder (MQA, learned positions)",
        notes="2 layers, 4 query heads over one KV head; positions np.arange(offset, offset + L): "
              "mlx-lm's batch mode crashes at B > 1 (ORACLE-BUG)",
        n_embd=64, n_layer=2, n_inner=128, n_head=4, n_positions=64, layer_norm_epsilon=1e-5,
        vocab_size=VOCAB_SIZE, multi_query=True,
    ),
    # NoPE global layers beside RoPE'd sliding ones: EXAONE 4 (pattern LLLG, q/k norm) and
    # Command R7B / cohere2 (every 4th layer global, parallel attention + MLP block,
    # LayerNorm, logit scale): a global layer reads no offset at all.
    _spec(
        "exaone4", "exaone4", "bfloat16", "EXAONE 4.0 (sliding RoPE layers, NoPE global layer, q/k norm)",
        notes="layers L L L G: window 8 with RoPE, then a full layer without; the pattern "
              "string is mlx-lm's (transformers' config class rejects it: tokenizer_for reads "
              "the files)",
        **_ATTN, num_hidden_layers=4, intermediate_size=128, rms_norm_eps=1e-5,
        max_position_embeddings=4096, rope_theta=1000000.0, head_dim=16,
        tie_word_embeddings=True, rope_scaling=None, sliding_window=8,
        sliding_window_pattern="LLLG",
    ),
    _spec(
        "cohere2", "cohere2", "bfloat16", "Command R7B (cohere2: sliding RoPE + NoPE global, parallel block)",
        notes="layers 0-2 sliding (window 8, RoPE), layer 3 full without RoPE; logit_scale 1 "
              "(the real 0.0625 flattens a random head's logits to ties)",
        **_ATTN, head_dim=16, num_hidden_layers=4, intermediate_size=128, rope_theta=50000.0,
        layer_norm_eps=1e-5, logit_scale=1.0, sliding_window=8, sliding_window_pattern=4,
    ),
    # Granite 4.0 hybrid: Mamba-2 layers, an attention layer and MoE (SwitchGLU + a shared
    # expert) in every layer, muP multipliers; float32 (GatherMM on the CPU).
    _spec(
        "granite-hybrid", "granitemoehybrid", "float32", "Granite 4.0 hybrid (Mamba-2 + attention + MoE)",
        notes="layers mamba/attention/mamba, each with a 4-expert top-2 MoE (experts 64 "
              "wide) and a shared expert; Mamba-2 8 heads of 16, state 32",
        **_ATTN, intermediate_size=64, num_hidden_layers=3, max_position_embeddings=4096,
        attention_bias=False, embedding_multiplier=12.0, attention_multiplier=0.0625,
        logits_scaling=1.0, residual_multiplier=0.22, layer_types=["mamba", "attention", "mamba"],
        rms_norm_eps=1e-6, num_local_experts=4, num_experts_per_tok=2,
        shared_intermediate_size=32, mamba_n_heads=8, mamba_d_head=16, mamba_proj_bias=False,
        mamba_d_state=32, mamba_d_conv=4, mamba_n_groups=1, mamba_conv_bias=True,
        rope_theta=10000.0,
    ),
    # Apple Foundation Model (afm7): the last layer reuses the previous layer's keys and
    # values (no cache of its own) and rotates its queries at ``S - L``, S the width of the
    # keys it is handed: in a batch the padded width, not the row's position. mlx-lm's
    # batch mode is wrong for every row shorter than the longest (ORACLE-BUG).
    _spec(
        "afm7", "afm7", "bfloat16", "Apple Foundation Model (KV-reuse layer, queries at the key width)",
        notes="3 layers: 2 with caches, a KV-reuse layer; fused qkv, fake 8-bit K/V, q/k "
              "norm; 4 heads of 16 over 2 KV heads",
        vocab_size=VOCAB_SIZE, hidden_dim=64, num_layers=3, num_kv_reuse_layers=1,
        num_heads=4, num_kv_heads=2, hidden_dim_scale_factor=2.0, rope_theta=50000.0,
        rms_norm_eps=1e-5,
    ),
    # --- mut7 (issue 26 item 6): multi-head attention, as many KV heads as query heads
    # (Llama-2-7B, GPT-2, Pythia, OPT are MHA). Every zoo model before it was GQA (or MLA's one
    # latent head), so on CUDA the invariant path's per-head row kernel never ran: the
    # GQA kernel takes every group > 1 (row_attention_gqa.fits). llama's tiny shape else.
    _spec(
        "llama-mha", "llama", "bfloat16", "Llama-2 style multi-head attention (no GQA)",
        notes="4 query heads over 4 KV heads (group 1: the per-head row kernel on CUDA); "
              "else the tiny llama",
        hidden_size=64, num_attention_heads=4, num_key_value_heads=4, vocab_size=VOCAB_SIZE,
        num_hidden_layers=2, intermediate_size=128, head_dim=16, rms_norm_eps=1e-5,
        rope_theta=10000.0, max_position_embeddings=4096, tie_word_embeddings=True,
    ),
    # --- issue 28 (fifteenth round): the real models' head counts. From 256 keys MLX's
    # unmasked decode attention on CUDA goes to cuDNN, which gave different bytes for the
    # same call at 32 query heads over 8 (B 64 and 256), while fast on cuDNN repeated
    # itself at the zoo's 4 over 2: only the real head counts let a CUDA gate see it. Hidden 64 keeps
    # them small (0.7M parameters each: the projections are 64 x 2048 and 64 x 4096).
    _spec(
        "llama-h32", "llama", "bfloat16", "Llama-3.2-1B attention heads (32 of 64 over 8 KV)",
        notes="32 query heads of 64 over 8 KV heads at hidden 64; else llama-hd64",
        hidden_size=64, num_attention_heads=32, num_key_value_heads=8, vocab_size=VOCAB_SIZE,
        num_hidden_layers=2, intermediate_size=128, head_dim=64, rms_norm_eps=1e-5,
        rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
        rope_scaling=_LLAMA3_ROPE,
    ),
    _spec(
        "qwen3-h32", "qwen3", "bfloat16", "Llama-3.1-8B attention heads (32 of 128 over 8 KV)",
        notes="32 query heads of 128 over 8 KV heads at hidden 64, q/k norm; one layer; "
              "else qwen3-hd128",
        hidden_size=64, num_attention_heads=32, num_key_value_heads=8, vocab_size=VOCAB_SIZE,
        num_hidden_layers=1, intermediate_size=128, head_dim=128, rms_norm_eps=1e-6,
        rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=True,
    ),
]
# fmt: on

ZOO: dict[str, ZooSpec] = {spec.name: spec for spec in _SPECS}
