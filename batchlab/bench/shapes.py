"""Random-weight models with the shapes of real checkpoints, built in memory.

A decode step's speed depends on the shapes (hidden size, layers, heads, KV heads, MLP
width, vocabulary, window pattern) and the dtype, not on the values, so the GPU bench runs
these instead of downloading checkpoints. Configs are the real models' ``config.json``
(text part), as mlx-lm's ``ModelArgs`` reads them.

Building is cheap in memory: mlx-lm's constructors only record lazy fp32 init graphs, and
each parameter is replaced by a bf16 ``normal * 0.02`` draw and evaluated on its own before
the next, so an 8B shape peaks at ~16 GB (its bf16 bytes), never at its fp32 size.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import mlx.core as mx
from mlx import nn
from mlx.utils import tree_flatten, tree_unflatten

from batchlab.zoo.load import vocab_size
from batchlab.zoo.weights import model_classes

WEIGHT_STD = 0.02


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    name: str
    model_type: str
    config: dict = field(hash=False)
    tied: bool  # the output head reuses the input embedding (no lm_head tensor)
    source: str  # the checkpoint whose config this is


_LLAMA3_ROPE = {"rope_type": "llama3", "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192}

# fmt: off
_SHAPES = [
    Shape(name="llama-3.2-1b", model_type="llama", tied=True,
          source="meta-llama/Llama-3.2-1B-Instruct",
          config={"hidden_size": 2048, "num_hidden_layers": 16, "intermediate_size": 8192,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                  "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                  "max_position_embeddings": 131072, "tie_word_embeddings": True,
                  "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0}}),
    Shape(name="llama-3.1-8b", model_type="llama", tied=False,
          source="meta-llama/Llama-3.1-8B-Instruct",
          config={"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 14336,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                  "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                  "max_position_embeddings": 131072, "tie_word_embeddings": False,
                  "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0}}),
    Shape(name="qwen3-0.6b", model_type="qwen3", tied=True, source="Qwen/Qwen3-0.6B",
          config={"hidden_size": 1024, "num_hidden_layers": 28, "intermediate_size": 3072,
                  "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                  "vocab_size": 151936, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                  "max_position_embeddings": 40960, "tie_word_embeddings": True}),
    # 5 sliding layers (window 1024) then 1 full, x 5 + 4; the head is tied
    Shape(name="gemma3-4b", model_type="gemma3_text", tied=True,
          source="google/gemma-3-4b-it (text_config)",
          config={"hidden_size": 2560, "num_hidden_layers": 34, "intermediate_size": 10240,
                  "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                  "vocab_size": 262208, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                  "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
                  "sliding_window": 1024, "sliding_window_pattern": 6,
                  "max_position_embeddings": 131072,
                  "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}),
]
# fmt: on

SHAPES: dict[str, Shape] = {s.name: s for s in _SHAPES}


def parse_shape_name(name: str) -> tuple[Shape, int | None] | None:
    """``"qwen3-0.6b"`` -> (shape, None); ``"qwen3-0.6b@L2"`` -> (shape, 2 layers), the
    real widths at 2 layers, for quick CPU checks. None when ``name`` is no shape."""
    base, _, layers = name.partition("@L")
    if base not in SHAPES:
        return None
    if layers and not (layers.isdigit() and int(layers) > 0):
        raise ValueError(f"bad shape {name!r}: write <shape>@L<layers>, e.g. {base}@L2")
    return SHAPES[base], int(layers) if layers else None


def build_shape(shape: Shape, num_layers: int | None = None, seed: int = 0) -> nn.Module:
    """The mlx-lm model of ``shape`` with random bf16 weights, evaluated."""
    model_cls, args_cls = model_classes(shape.model_type)
    config = copy.deepcopy({"model_type": shape.model_type, **shape.config})
    if num_layers is not None:
        pattern = config.get("sliding_window_pattern", 1)
        if num_layers < pattern:  # gemma3 reads the cache of layer pattern-1 for its mask
            raise ValueError(f"{shape.name} needs >= {pattern} layers (one sliding/full "
                             f"pattern); try {shape.name}@L{pattern}")
        config["num_hidden_layers"] = num_layers
    model = model_cls(args_cls.from_dict(config))
    if shape.tied and "lm_head" in model:
        # gemma3_text builds an lm_head and ties only when the checkpoint lacks one
        model.tie_word_embeddings = True
        model.pop("lm_head")
    key = mx.random.key(seed)
    params = []
    for path, p in tree_flatten(model.parameters()):
        key, draw = mx.random.split(key)
        if p.ndim >= 2:
            new = mx.random.normal(p.shape, dtype=mx.bfloat16, key=draw) * WEIGHT_STD
        else:  # norm gains and biases keep their identity init (1, or 0 for 1 + w norms)
            new = p.astype(mx.bfloat16)
        mx.eval(new)  # one parameter at a time: no fp32 copy of the whole model is ever live
        params.append((path, new))
    model.update(tree_unflatten(params))
    model.eval()
    return model


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchModel:
    name: str  # as given: a shape, zoo name or directory
    kind: str  # "shape", "zoo" or "dir"
    model: nn.Module
    dtype: str
    vocab_size: int


def check_model_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a shape, a zoo name or a model directory."""
    from pathlib import Path

    from batchlab.zoo import ZOO

    if parse_shape_name(name) or name in ZOO or (Path(name).expanduser() / "config.json").is_file():
        return
    raise ValueError(
        f"{name!r} is no shape ({', '.join(SHAPES)}, or <shape>@L<layers>), "
        f"no zoo model ({', '.join(ZOO)}) and no mlx-lm model directory"
    )


def load_model(name: str) -> BenchModel:
    """A shape name (``llama-3.1-8b``, ``qwen3-0.6b@L2``), a zoo name, or an mlx-lm model
    directory. Directories load without the zoo's cache and fingerprint (which would
    hash every byte of a real checkpoint)."""
    from pathlib import Path

    from batchlab.zoo import ZOO
    from batchlab.zoo import load as zoo_load

    check_model_name(name)
    parsed = parse_shape_name(name)
    if parsed is not None:
        model, kind = build_shape(*parsed), "shape"
    elif name in ZOO:
        model, kind = zoo_load(name).model, "zoo"
    else:
        from mlx_lm.utils import load_model as mlx_lm_load

        model, _ = mlx_lm_load(Path(name).expanduser())
        kind, name = "dir", Path(name).expanduser().resolve().name
    return BenchModel(name=name, kind=kind, model=model, dtype=_main_dtype(model),
                      vocab_size=vocab_size(model))


def _main_dtype(model: nn.Module) -> str:
    sizes: dict[str, int] = {}
    for _, p in tree_flatten(model.parameters()):
        key = str(p.dtype).removeprefix("mlx.core.")
        sizes[key] = sizes.get(key, 0) + p.size
    return max(sizes, key=sizes.get)
