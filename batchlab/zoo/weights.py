"""Deterministic random weights for a zoo spec: same bytes on every machine and backend.

mlx-lm's constructors draw from the global RNG, so after building the module we redraw
every parameter from its own key, seeded by `sha256(f"{spec.name}/{path}")[:8]`: adding a
layer or reordering a dict never shifts another parameter's draw. Draws are uniform and the
key is consumed on the CPU stream (threefry bits, then IEEE `+ * /`, all correctly rounded);
normal draws go through an erfinv polynomial whose last bits can depend on FMA contraction,
i.e. on the ISA. The affine map to the parameter's range is done in float64 numpy, then
rounded once to float32 and once to the spec dtype (round-to-nearest-even everywhere).

Scales keep random models numerically sane AND make them generate varied greedy tokens
(tuned on 16 prompts x 24 steps per model; a stuck or echoing model makes rows identical,
which hides row-mixing bugs from a token comparison):
- matrices: std 1/sqrt(fan_in), so every block moves the residual stream;
- embeddings: std 0.02, small beside the blocks' output: with a tied head, a large
  embedding makes the model echo its input token and settle on a fixed point;
- attention: queries 3x (q_proj std, or the q-norm weight), so attention picks positions
  instead of averaging the context: with flat attention a 2-layer model is nearly a map
  token -> token and falls into short cycles;
- the head: logits of std ~1.5 (via lm_head std, or the final norm's gain when tied), peaked
  enough that bf16 logprob ties (mlx-lm takes argmax of logprobs) stay rare (~2%);
- norms sit near their identity; SSM decays keep a few tokens of state.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import math

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx.utils import tree_flatten, tree_map_with_path

from batchlab.zoo.specs import ZooSpec

EMBED_STD = 0.02
QUERY_GAIN = 3.0
LOGIT_STD = 1.5

# Norms that apply `1 + weight` (Gemma 1/2/3): their identity is weight 0, not 1.
_OFFSET_NORMS = {"mlx_lm.models.gemma2.RMSNorm", "mlx_lm.models.gemma3_text.RMSNorm"}
_HEAD_NORMS = {"norm", "norm_f", "embedding_norm"}  # the final norm, outside `.layers.`
_QUERY_NORMS = {"q_norm", "q_layernorm"}

# Named parameters with a structural meaning: (low, high) of their uniform draw.
_NAMED_RANGES = {
    "A_log": (0.0, 2.75),  # A = exp(A_log) in [1, 15.6], the mamba/GDN init range
    "dt_bias": (-4.0, -2.0),  # softplus -> dt ~0.02..0.13: decays keep a few tokens of state
    "D": (0.9, 1.1),  # SSM skip connection
    "sinks": (-1.0, 1.0),  # gpt-oss per-head attention-sink logits
    "layer_scalar": (0.9, 1.1),  # gemma4 per-layer output scale
    "scale": (0.9, 1.1),  # gemma4 router pre-norm scale
    "per_expert_scale": (0.9, 1.1),  # gemma4 router per-expert output scale
    "conv_k": (0.3, 0.7),  # baichuan-m1's 2-tap key / value conv over time: a blend of
    "conv_v": (0.3, 0.7),  # this token and the previous one
    "e_score_correction_bias": (-0.1, 0.1),  # nemotron-h router: a small per-expert nudge
    # rwkv7: token-shift mixes (x_prev - x) * mix, a blend of this token and the last one
    "x_r": (0.2, 0.8), "x_w": (0.2, 0.8), "x_k": (0.2, 0.8), "x_v": (0.2, 0.8),
    "x_a": (0.2, 0.8), "x_g": (0.2, 0.8),
    "k_k": (0.5, 1.5),  # rwkv7: the key's gain before its l2 norm (the delta rule's key)
    "k_a": (0.5, 1.5),  # rwkv7: how far the in-context learning rate scales the key
    "r_k": (-0.5, 0.5),  # rwkv7: the receptance x key bonus per channel
    # afm7: the step of the fake 8-bit quantization of keys and values (x / s rounded,
    # clipped to int8): normed keys of size ~1-3 keep 8 bits at ~0.03
    "quant_key_scale": (0.02, 0.04), "quant_value_scale": (0.01, 0.03),
}


def param_seed(model_name: str, path: str) -> int:
    """Stable 64-bit seed of one parameter (never Python's salted `hash()`)."""
    digest = hashlib.sha256(f"{model_name}/{path}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def model_classes(model_type: str) -> tuple[type, type]:
    """mlx-lm's (Model, ModelArgs) for a model_type, as `mlx_lm.utils.load_model` picks."""
    try:
        arch = importlib.import_module(f"mlx_lm.models.{model_type}")
    except ImportError as e:
        raise ValueError(f"mlx-lm has no model_type {model_type!r}") from e
    return arch.Model, arch.ModelArgs


def instantiate(spec: ZooSpec) -> nn.Module:
    """The mlx-lm module of a spec, with the constructors' (throwaway) weights."""
    model_cls, args_cls = model_classes(spec.model_type)
    # A deep copy: some ModelArgs edit nested dicts in place (qwen3_5 renames rope_parameters'
    # "rope_type" to "type"), which would change the spec's hash mid-process.
    config = copy.deepcopy({"model_type": spec.model_type, **spec.config})
    args = args_cls.from_dict(config)
    with mx.stream(mx.cpu):
        return model_cls(args)


def _std_range(std: float) -> tuple[float, float]:
    bound = std * math.sqrt(3.0)  # a uniform on [-b, b] has std b / sqrt(3)
    return (-bound, bound)


def _uniform_range(
    path: str, module: nn.Module, shape: tuple[int, ...], *, tied: bool, head_input_scale: float,
    logit_std: float = LOGIT_STD,
) -> tuple[float, float]:
    """(low, high) of the draw for one parameter; unknown kinds raise, never guess."""
    parts = path.split(".")
    name, owner = parts[-1], parts[-2] if len(parts) > 1 else ""
    cls = f"{type(module).__module__}.{type(module).__name__}"
    if name in _NAMED_RANGES:
        return _NAMED_RANGES[name]
    if name == "bias":
        return (-0.02, 0.02)
    if name == "weight" and "Norm" in type(module).__name__:
        gain = 1.0
        if owner in _QUERY_NORMS:
            gain = QUERY_GAIN
        elif tied and owner in _HEAD_NORMS and ".layers." not in path:
            gain = logit_std / (EMBED_STD * math.sqrt(shape[0]))  # logits = norm(h) . E
        centre = gain - 1.0 if cls in _OFFSET_NORMS else gain
        return (centre - 0.1, centre + 0.1)
    if name == "weight" and isinstance(module, nn.Embedding):
        return _std_range(EMBED_STD)
    if name == "weight" and isinstance(module, nn.Conv1d):
        return _std_range(1.0 / math.sqrt(shape[1] * shape[2]))  # depthwise: fan_in = kernel
    if name == "weight" and len(shape) >= 2:  # Linear (out, in), SwitchLinear (E, out, in)
        gain = {"q_proj": QUERY_GAIN, "lm_head": logit_std / head_input_scale}.get(owner, 1.0)
        return _std_range(gain / math.sqrt(shape[-1]))
    raise ValueError(f"zoo weights: no init rule for {path} ({cls}, shape {shape})")


def _draw(seed: int, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
    """Float32 uniform draw in [low, high); bit-identical on every platform."""
    with mx.stream(mx.cpu):
        unit = mx.random.uniform(shape=shape, dtype=mx.float32, key=mx.random.key(seed))
        unit = np.array(unit, dtype=np.float64)
    return (low + (high - low) * unit).astype(np.float32)


def random_weights(spec: ZooSpec, model: nn.Module | None = None) -> dict[str, mx.array]:
    """Every parameter of `spec` redrawn from its own key, cast to the spec dtype.

    Returns the flat `{path: array}` dict that `model.safetensors` stores. A head the
    config declares tied (`tie_word_embeddings`) is dropped, as real checkpoints do.
    """
    model = model if model is not None else instantiate(spec)
    modules = dict(model.named_modules())
    cfg = spec.config
    tied = bool(cfg.get("tie_word_embeddings")) or "lm_head" not in modules
    # MiniCPM (muP) divides the lm_head input by hidden_size / dim_model_base.
    head_input_scale = (
        cfg["dim_model_base"] / cfg["hidden_size"] if "dim_model_base" in cfg else 1.0
    )
    # A spec may ask for flatter logits (llama-flat: ties in bf16 logprobs, see specs.py).
    logit_std = cfg.get("batchlab_logit_std", LOGIT_STD)
    dtype = getattr(mx, spec.dtype)
    # mlx-lm's convert keeps some parameters in float32 (qwen3.5 A_log); so do we.
    may_cast = getattr(model, "cast_predicate", None) or (lambda _path: True)

    def redraw(path: str, old: mx.array) -> mx.array:
        owner = modules[path.rsplit(".", 1)[0]] if "." in path else model
        shape = tuple(old.shape)
        low, high = _uniform_range(path, owner, shape, tied=tied,
                                   head_input_scale=head_input_scale, logit_std=logit_std)
        new = mx.array(_draw(param_seed(spec.name, path), shape, low, high))
        return new.astype(dtype) if may_cast(path) else new

    # The casts too run on the CPU: one rounding rule for every backend that builds.
    with mx.stream(mx.cpu):
        flat = dict(tree_flatten(tree_map_with_path(redraw, model.parameters())))
        if cfg.get("tie_word_embeddings"):
            flat.pop("lm_head.weight", None)
        mx.eval(flat)
    return flat


def quantized_weights(weights: dict[str, mx.array], quantization: dict) -> dict[str, mx.array]:
    """``weights`` as mlx-lm's ``convert -q`` stores them: every matrix whose rows split
    into whole groups (the Linear and Embedding weights) as ``mx.quantize``'s packed
    weight, scales and biases; mlx-lm's ``load_model`` quantizes exactly the modules whose
    ``.scales`` it finds. Quantized on the CPU stream, as the draws: the same bytes on
    every machine."""
    group, bits = quantization["group_size"], quantization["bits"]
    out = {}
    for key, value in weights.items():
        if not (key.endswith(".weight") and value.ndim == 2 and value.shape[-1] % group == 0):
            out[key] = value
            continue
        prefix = key.removesuffix(".weight")
        with mx.stream(mx.cpu):
            packed, scales, biases = mx.quantize(value, group_size=group, bits=bits)
        out[key], out[f"{prefix}.scales"], out[f"{prefix}.biases"] = packed, scales, biases
    return out

