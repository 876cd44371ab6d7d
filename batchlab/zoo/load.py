"""Resolve a model name or directory, load it once per process, and describe it.

    resolve("gemma3")          -> ~/.cache/batchlab/zoo/gemma3-<build_hash12>  (built if missing)
    resolve("smollm2-135m")    -> ~/.cache/batchlab/zoo/smollm2-135m-<hash12>  (real.py, a GGUF)
    resolve("/models/Llama-3") -> /models/Llama-3  (any mlx-lm model dir with config.json)

The fingerprint is a digest of the tensor bytes themselves, not of files or paths, so the
same weights fingerprint the same wherever they sit; goldens are stamped with it.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import mlx.core as mx
from mlx import nn
from mlx.utils import tree_flatten
from mlx_lm.models.cache import ArraysCache

from batchlab.zoo.build import build
from batchlab.zoo.cache import cache_root
from batchlab.zoo.real import REAL, build_real
from batchlab.zoo.specs import ZOO
from batchlab.zoo.variants import is_variant, variant_spec

_CHUNK = 16 << 20


def zoo_names() -> list[str]:
    """Every name `resolve` builds: the random-weight specs, then the real checkpoints."""
    return [*ZOO, *REAL]


def resolve(name_or_path: str) -> Path:
    """A zoo name (built on first use) or an existing local mlx-lm model directory."""
    if name_or_path in ZOO:
        return build(ZOO[name_or_path], cache_root() / "zoo")
    if name_or_path in REAL:
        return build_real(REAL[name_or_path], cache_root() / "zoo")
    if is_variant(name_or_path):
        return build(variant_spec(name_or_path), cache_root() / "zoo")
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    raise ValueError(
        f"{name_or_path!r} is neither a zoo model nor a local mlx-lm model directory "
        f"(no config.json there). Zoo models: {', '.join(zoo_names())}. Otherwise pass the path "
        "of a model directory (config.json + *.safetensors), e.g. one made by mlx_lm.convert."
    )


def _tensor_index(path: Path) -> list[tuple[str, str, list[int], Path, int, int]]:
    """(name, dtype, shape, file, start, end) of every tensor in one file, from its header."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    base = 8 + header_len
    return [
        (name, info["dtype"], info["shape"], path, base + info["data_offsets"][0],
         base + info["data_offsets"][1])
        for name, info in header.items()
        if name != "__metadata__"
    ]  # fmt: skip


def fingerprint(path: Path) -> str:
    """sha256 over all tensors of all *.safetensors in `path`, sorted by name; 16 hex.

    Hashes (name, dtype, shape, raw bytes) only: file names, sharding, tensor order in the
    file and its metadata do not count. Reads in 16 MiB chunks (real 8B models are 16 GB).
    """
    index = [t for f in sorted(Path(path).glob("*.safetensors")) for t in _tensor_index(f)]
    if not index:
        raise ValueError(f"no *.safetensors tensors in {path}")
    h = hashlib.sha256()
    for name, dtype, shape, file, start, end in sorted(index, key=lambda t: t[0]):
        h.update(f"{name}|{dtype}|{','.join(map(str, shape))}|{end - start}|".encode())
        with open(file, "rb") as f:
            f.seek(start)
            for offset in range(start, end, _CHUNK):
                h.update(f.read(min(_CHUNK, end - offset)))
    return h.hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadedModel:
    name: str  # the zoo name, or the directory's name
    path: Path
    model: nn.Module
    config: dict
    dtype: str  # the floating dtype holding most parameter elements, e.g. "bfloat16"
    fingerprint: str


def _main_dtype(model: nn.Module) -> str:
    sizes = Counter()
    for _, p in tree_flatten(model.parameters()):
        if mx.issubdtype(p.dtype, mx.floating):
            sizes[str(p.dtype).removeprefix("mlx.core.")] += p.size
    return sizes.most_common(1)[0][0] if sizes else "unknown"


@cache
def _load_dir(path: Path, name: str) -> LoadedModel:
    from mlx_lm.utils import load_model  # heavy import (transformers): only when loading

    model, config = load_model(path)
    return LoadedModel(
        name=name,
        path=path,
        model=model,
        config=config,
        dtype=_main_dtype(model),
        fingerprint=fingerprint(path),
    )


def load(name_or_path: str) -> LoadedModel:
    """Load (once per process) a zoo model or a local model dir; no tokenizer."""
    path = resolve(name_or_path)
    name = name_or_path if name_or_path in zoo_names() or is_variant(name_or_path) else path.name
    return _load_dir(path, name)


def _cache_kind(cache) -> str:
    kind = type(cache).__name__
    if kind == "KVCache":
        return "full"
    if kind == "RotatingKVCache":
        return f"sliding{cache.max_size}"
    if kind == "ChunkedKVCache":
        return f"chunked{cache.chunk_size}"
    if kind == "CacheList":
        return f"list({','.join(_cache_kind(c) for c in cache.caches)})"
    if isinstance(cache, ArraysCache):  # conv and/or recurrent state, incl. MambaCache
        return "ssm"
    return kind


def _config_tags(config: dict) -> list[str]:
    cfg = {**config, **config.get("text_config", {})}
    tags = []
    if cfg.get("enable_moe_block") or any(
        (cfg.get(k) or 0) > 0 for k in ("num_experts", "num_local_experts", "n_routed_experts")
    ):
        tags.append("moe")
    if cfg.get("hidden_size_per_layer_input"):
        tags.append("per-layer-input")
    if (cfg.get("num_kv_shared_layers") or 0) > 0:
        tags.append("kv-shared")
    if cfg.get("kv_lora_rank"):  # multi-head latent attention: a latent KV cache
        tags.append("mla")
    return tags


def layer_kinds(loaded: LoadedModel) -> str:
    """e.g. `"sliding8×2 full×2"`, `"ssm×3 full +moe"`: cache kinds in order of appearance.

    One entry per cache `make_cache()` returns, so KV-shared layers (which own no cache) are
    not counted; the `+kv-shared` tag says they exist.
    """
    model = loaded.model
    if hasattr(model, "make_cache"):
        kinds = [_cache_kind(c) for c in model.make_cache()]
    else:
        kinds = ["full"] * len(model.layers)
    counts = Counter(kinds)  # insertion-ordered: first appearance first
    parts = [k if n == 1 else f"{k}×{n}" for k, n in counts.items()]
    parts += [f"+{tag}" for tag in _config_tags(loaded.config)]
    return " ".join(parts)


def param_count(loaded: LoadedModel) -> int:
    """Number of parameter elements (as stored: packed for quantized weights)."""
    return sum(p.size for _, p in tree_flatten(loaded.model.parameters()))


def logical_param_count(loaded: LoadedModel) -> int:
    """Number of weights as the checkpoint counts them: packed words unpacked, quantization
    scales and biases not counted (SmolLM2-135M: 134,515,008; param_count: 28,789,056)."""
    modules = dict(loaded.model.named_modules())
    total = 0
    for path, p in tree_flatten(loaded.model.parameters()):
        owner_path, _, leaf = path.rpartition(".")
        owner = modules.get(owner_path)
        if isinstance(owner, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            if leaf == "weight":
                total += p.size * 32 // owner.bits
            elif leaf not in ("scales", "biases"):
                total += p.size
        else:
            total += p.size
    return total


# Token tables by name; a learned position table (gpt2's ``wpe``, 64 rows in the zoo)
# sorts before gpt2's ``wte`` and was taken for the vocabulary: serve refused ids >= 64.
_TOKEN_TABLES = ("embed_tokens", "wte")
_POSITION_TABLES = ("wpe", "position")


def vocab_size(model: nn.Module) -> int:
    """Rows of the token embedding: the ids a random prompt may use."""
    tables = [(name, m) for name, m in model.named_modules()
              if isinstance(m, (nn.Embedding, nn.QuantizedEmbedding))]
    for name, table in tables:
        if name.rsplit(".", 1)[-1] in _TOKEN_TABLES:
            return table.weight.shape[0]
    tables = [(n, t) for n, t in tables if not any(p in n for p in _POSITION_TABLES)]
    if not tables:
        raise ValueError("the model has no embedding table to draw prompt ids from")
    return tables[0][1].weight.shape[0]
