"""Convert a llama-architecture GGUF into an mlx-lm model directory, keeping its quantization.

    write_gguf_model(Path("SmolLM2-135M-Instruct.Q4_1.gguf"), directory)
        config.json            llama ModelArgs from `llama.*` metadata, "rope_traditional":
                               true, and a "quantization" block when any tensor is quantized
        model.safetensors      the tensors as `mx.load` gives them, renamed to mlx-lm's paths
        tokenizer.json         gguf_tokenizer.build_gguf_tokenizer(metadata)
        tokenizer_config.json  specials, BOS policy and the GGUF's chat template

Nothing is dequantized: MLX reads Q4_0 / Q4_1 / Q8_0 blocks straight into its own affine
group-32 layout (packed uint32 `weight`, float16 `scales` and `biases`), which is what
mlx-lm's QuantizedLinear runs. Other block types (K-quants, IQ*) are refused by name.

GGUF's llama converter permutes Q and K rows into the interleaved (original Meta) RoPE
order; mlx-lm's `rope_traditional` is exactly that order, so the rows stay as they are.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import mlx.core as mx
import numpy as np

from batchlab.gguf.header import SUPPORTED_TYPES, GGUFError, read_gguf_header
from batchlab.gguf.tokenizer import build_gguf_tokenizer, gguf_tokenizer_config, special_ids

GROUP_SIZE = 32  # every GGUF block type MLX maps holds 32 weights per block

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)")


def mlx_lm_name(gguf_name: str) -> str:
    """`blk.3.attn_q.scales` -> `model.layers.3.self_attn.q_proj.scales`; GGUFError if unknown."""
    base, _, leaf = gguf_name.rpartition(".")
    if base in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[base]}.{leaf}"
    match = _BLOCK.fullmatch(base)
    if match and match.group(2) in _BLOCK_NAMES:
        return f"model.layers.{match.group(1)}.{_BLOCK_NAMES[match.group(2)]}.{leaf}"
    raise GGUFError(
        f"tensor {gguf_name!r} has no place in mlx-lm's llama model (MoE experts, llama3 "
        "rope_freqs and biases are not converted); batchlab imports dense llama GGUFs only"
    )


def _scalar(metadata: dict, key: str, default=None):
    value = metadata.get(key, default)
    if value is None:
        raise GGUFError(f"the GGUF has no {key!r}: not a complete llama checkpoint")
    return value.item() if hasattr(value, "item") else value


def _float32(value: float) -> float:
    """The shortest decimal of a float32 (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def quantization(weights: dict[str, mx.array]) -> dict | None:
    """mlx-lm's quantization block: the commonest bit width, plus per-module exceptions."""
    bits = {}
    for name, scales in weights.items():
        if name.endswith(".scales"):
            module = name.removesuffix(".scales")
            packed = weights[f"{module}.weight"].shape[-1]  # in * bits / 32 uint32 words
            bits[module] = packed * 32 // (scales.shape[-1] * GROUP_SIZE)
    if not bits:
        return None
    default = Counter(bits.values()).most_common(1)[0][0]
    block: dict = {"group_size": GROUP_SIZE, "bits": default}
    for module in sorted(bits):
        if bits[module] != default:
            block[module] = {"group_size": GROUP_SIZE, "bits": bits[module]}
    return block


def llama_config(metadata: dict, weights: dict[str, mx.array]) -> dict:
    """config.json for mlx-lm's llama model, from the GGUF's `llama.*` keys."""
    hidden = int(_scalar(metadata, "llama.embedding_length"))
    heads = int(_scalar(metadata, "llama.attention.head_count"))
    head_dim = int(_scalar(metadata, "llama.attention.key_length", hidden // heads))
    rotary = int(_scalar(metadata, "llama.rope.dimension_count", head_dim))
    if rotary != head_dim:
        raise GGUFError(f"RoPE covers {rotary} of {head_dim} head dims; mlx-lm's llama rotates all")
    if "llama.rope.scaling.type" in metadata or "rope_freqs.weight" in weights:
        raise GGUFError("the GGUF scales RoPE (llama3 / linear / yarn); batchlab converts unscaled")
    ids = special_ids(metadata)
    dtypes = Counter(str(w.dtype).removeprefix("mlx.core.") for n, w in weights.items()
                     if n.endswith((".scales", ".weight")) and w.dtype != mx.uint32)  # fmt: skip
    dtype = "float16" if dtypes.get("float16", 0) >= dtypes.get("float32", 0) else "float32"
    config = {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": int(_scalar(metadata, "llama.block_count")),
        "intermediate_size": int(_scalar(metadata, "llama.feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_scalar(metadata, "llama.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": _float32(_scalar(metadata, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": _float32(_scalar(metadata, "llama.rope.freq_base", 10000.0)),
        "rope_traditional": True,
        "vocab_size": int(weights["model.embed_tokens.weight"].shape[0]),
        "max_position_embeddings": int(_scalar(metadata, "llama.context_length", 4096)),
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": ids["bos"],
        "eos_token_id": ids["eos"],
        "pad_token_id": ids["pad"],
        "torch_dtype": dtype,  # transformers < 5 spelling
        "dtype": dtype,  # transformers >= 5 spelling
    }
    if (block := quantization(weights)) is not None:
        config["quantization"] = block
    return config


def load_gguf(path: Path) -> tuple[dict[str, mx.array], dict]:
    """(mlx-lm-named weights, metadata) of a llama GGUF with supported tensor types only."""
    header = read_gguf_header(path)
    if header.architecture != "llama":
        raise GGUFError(
            f"{path}: general.architecture is {header.architecture!r}; batchlab imports "
            "'llama' GGUFs (Llama, Mistral, SmolLM, ...) only"
        )
    if bad := header.unsupported_tensors():
        kinds = ", ".join(sorted(set(bad.values())))
        first = ", ".join(list(bad)[:3])
        raise GGUFError(
            f"{path}: {len(bad)} tensor(s) of type {kinds} (e.g. {first}); MLX runs "
            f"{', '.join(SUPPORTED_TYPES)} only: requantize with llama.cpp's llama-quantize "
            "to Q4_0, Q4_1 or Q8_0 (or use F16)"
        )
    raw, metadata = mx.load(str(path), return_metadata=True)
    return {mlx_lm_name(name): array for name, array in raw.items()}, metadata


def write_gguf_model(path: Path, directory: Path, *, source: dict | None = None) -> None:
    """Write the four mlx-lm files converted from the GGUF at `path` into `directory`."""
    weights, metadata = load_gguf(Path(path))
    config = llama_config(metadata, weights)
    config["batchlab_gguf"] = {"file": Path(path).name, **(source or {})}
    # The tokenizer first: a refused vocabulary should cost no weight write.
    tokenizer = build_gguf_tokenizer(metadata)
    tokenizer_config = gguf_tokenizer_config(metadata)
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    ordered = {k: weights[k] for k in sorted(weights)}
    mx.save_safetensors(str(directory / "model.safetensors"), ordered, metadata={"format": "mlx"})
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n"
    )
