"""Which backend produced some bits, and with which library versions.

Goldens are per backend: bits made on one backend say nothing about another, so every
golden and every report is keyed by ``backend_key()``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform

import mlx.core as mx


@functools.cache
def backend_key() -> str:
    """``cpu-x86_64``, ``cuda-sm90`` or ``metal-<chip>``: the folder name under goldens/."""
    if mx.default_device() == mx.cpu or not mx.is_available(mx.gpu):
        return f"cpu-{platform.machine()}"
    if hasattr(mx, "cuda") and mx.cuda.is_available():
        return f"cuda-{_cuda_arch()}"
    chip = mx.metal.device_info().get("device_name", "gpu")
    return "metal-" + str(chip).lower().replace(" ", "-")


def on_cuda() -> bool:
    """Whether arrays compute on MLX's CUDA backend (where some kernels differ)."""
    return (mx.default_device().type == mx.gpu and hasattr(mx, "cuda")
            and mx.cuda.is_available())


def _cuda_arch() -> str:
    """``sm90`` from the device's compute capability when MLX reports it, else its name."""
    info = mx.device_info() if hasattr(mx, "device_info") else {}
    arch = str(info.get("architecture", "")).lower().replace("_", "")
    if arch.startswith("sm"):
        return arch
    name = str(info.get("device_name", "gpu")).lower()
    return name.replace("nvidia", "").strip().replace(" ", "-") or "gpu"


def versions() -> dict[str, str]:
    """The versions that make a golden stale when they change."""
    return dict(_installed_versions())


@functools.cache  # each lookup parses the packages' METADATA: ~3 ms, once per golden read
def _installed_versions() -> tuple[tuple[str, str], ...]:
    return (("mlx", importlib.metadata.version("mlx")),
            ("mlx_lm", importlib.metadata.version("mlx-lm")))
