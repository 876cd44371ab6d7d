"""Tiny deterministic random-weight models of real architectures, built locally.

`load("gemma3")` builds (once, atomically, into the cache) and loads a zoo model;
`load("/path/to/model")` loads any local mlx-lm model directory the same way.
"""

from batchlab.zoo.build import build, model_dir_name, spec_hash
from batchlab.zoo.load import (
    LoadedModel,
    cache_root,
    fingerprint,
    layer_kinds,
    load,
    param_count,
    resolve,
)
from batchlab.zoo.specs import ZOO, ZooSpec

__all__ = [
    "ZOO",
    "LoadedModel",
    "ZooSpec",
    "build",
    "cache_root",
    "fingerprint",
    "layer_kinds",
    "load",
    "model_dir_name",
    "param_count",
    "resolve",
    "spec_hash",
]
