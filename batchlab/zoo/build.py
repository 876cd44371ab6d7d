"""Write a zoo model directory that `mlx_lm.load(dir)` accepts offline, atomically.

    <root>/<name>-<spec_hash12>/
        config.json            ModelArgs dict + model_type + eos/bos/pad ids + dtype
        model.safetensors      weights.random_weights(spec), metadata {"format": "mlx"}
        tokenizer.json         tokenizer.build_tokenizer()
        tokenizer_config.json

Everything is written into a hidden temp dir next to the target and renamed into place, so
a reader sees either no directory or a complete one; a crash leaves only a `.tmp-` dir.
Two processes racing to build the same spec both succeed: the loser's rename fails against
the winner's complete dir, and the loser throws its copy away.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx

from batchlab.zoo import tokenizer
from batchlab.zoo.specs import ZooSpec
from batchlab.zoo.weights import quantized_weights, random_weights

# Bump when weights.py or config.json change what a spec builds into: it is hashed into the
# directory name, so every cached zoo model rebuilds instead of silently keeping old bytes.
# (2: the tuned init scales; builds made with 1 echo their input token.) It is also in
# config.json (`spec_hash`), and goldens are stamped with a digest of config.json: a bump
# stales every golden.
RECIPE_VERSION = 2

# Bump when tokenizer.py changes the tokenizer files. Hashed into the directory name only,
# not into config.json, so a tokenizer change rebuilds the cache but stales no golden
# (goldens hold token ids, which the tokenizer files do not touch).
# (2: tokenizer_config.json gained a chat template.)
TOKENIZER_VERSION = 2

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def spec_hash(spec: ZooSpec) -> str:
    """sha256 of the canonical JSON of the spec and the build recipe version."""
    blob = {"recipe": RECIPE_VERSION, "spec": dataclasses.asdict(spec)}
    canonical = json.dumps(blob, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def build_hash(spec: ZooSpec) -> str:
    """sha256 of everything a build writes: the spec hash and the tokenizer version."""
    return hashlib.sha256(f"{spec_hash(spec)}/tokenizer{TOKENIZER_VERSION}".encode()).hexdigest()


def model_dir_name(spec: ZooSpec) -> str:
    """e.g. `gemma3-1a2b3c4d5e6f`: the name a human reads, the hash that changes with it."""
    return f"{spec.name}-{build_hash(spec)[:12]}"


def model_config(spec: ZooSpec) -> dict:
    """config.json: the spec's ModelArgs plus the boilerplate loaders look for."""
    return {
        "model_type": spec.model_type,
        **spec.config,
        "bos_token_id": tokenizer.BOS_ID,
        "eos_token_id": tokenizer.EOS_ID,
        "pad_token_id": tokenizer.PAD_ID,
        "torch_dtype": spec.dtype,  # transformers < 5 spelling
        "dtype": spec.dtype,  # transformers >= 5 spelling
        "batchlab_zoo": {
            "name": spec.name,
            "spec_hash": spec_hash(spec),
            "stands_in_for": spec.stands_in_for,
        },
    }


def is_complete(directory: Path) -> bool:
    return all((directory / f).is_file() for f in REQUIRED_FILES)


def _write(spec: ZooSpec, directory: Path) -> None:
    config = json.dumps(model_config(spec), indent=2, sort_keys=True, allow_nan=False)
    (directory / "config.json").write_text(config + "\n")
    weights = random_weights(spec)
    if "quantization" in spec.config:  # a quantized checkpoint (config.json says how)
        weights = quantized_weights(weights, spec.config["quantization"])
    # Sorted keys: the file layout (and so its bytes) never depends on module order.
    ordered = {k: weights[k] for k in sorted(weights)}
    mx.save_safetensors(str(directory / "model.safetensors"), ordered, metadata={"format": "mlx"})
    tokenizer.write_tokenizer(directory)


def build(spec: ZooSpec, root: Path) -> Path:
    """Build `spec` under `root` (reusing a complete existing build); return its directory."""
    return build_atomically(Path(root) / model_dir_name(spec), lambda tmp: _write(spec, tmp))


def build_atomically(target: Path, write: Callable[[Path], None]) -> Path:
    """`write(tmp)` into a temp dir beside `target`, then rename it into place whole.

    A complete `target` is reused as it is; an incomplete one (not made here) is refused.
    """
    target = Path(target)
    if is_complete(target):
        return target
    if target.exists():
        raise RuntimeError(
            f"{target} exists but is incomplete (missing one of {REQUIRED_FILES}); "
            "zoo builds are renamed into place whole, so something else wrote there: delete it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        write(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the cache may be shared
        try:
            os.rename(tmp, target)  # atomic; fails if a racing build already landed
        except OSError:
            if not is_complete(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
