"""`batchlab zoo list`, `zoo build [NAME...]` and `zoo import FILE.gguf` (wired in cli.py)."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from batchlab.gguf.convert import write_gguf_model
from batchlab.zoo.build import build_atomically
from batchlab.zoo.load import (
    cache_root,
    layer_kinds,
    load,
    logical_param_count,
    resolve,
    zoo_names,
)
from batchlab.zoo.real import GGUF_RECIPE_VERSION, REAL, RealModelMissing, file_sha256
from batchlab.zoo.specs import ZOO


def _quantization(config: dict) -> str:
    block = config.get("quantization")
    return f" q{block['bits']}g{block['group_size']}" if block else ""


# Below this width the seven columns fold into unreadable slivers: each model becomes one
# line of ids and an indented line of prose that wraps between words.
WIDE_TABLE = 140


def list_command(console: Console) -> int:
    """One row per zoo model, building any not yet in the cache (a second or so each)."""
    rows = [_describe(name) for name in zoo_names()]
    title = f"batchlab zoo ({cache_root() / 'zoo'})"
    if console.width >= WIDE_TABLE:
        table = Table(title=title)
        # Ids never wrap (they are what one copies); the prose columns take what is left.
        for column in ("name", "architecture", "dtype", "params", "fingerprint"):
            table.add_column(column, no_wrap=True,
                             justify="right" if column == "params" else "left")
        table.add_column("layer kinds")
        table.add_column("stands in for")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return 0
    console.print(title, highlight=False, soft_wrap=True)
    widths = [max(len(row[i]) for row in rows) for i in (0, 2, 3)]
    for name, arch, dtype, params, fingerprint, kinds, stands_in_for in rows:
        ids = f"{name:<{widths[0]}}  {dtype:<{widths[1]}}  {params:>{widths[2]}}  {fingerprint}"
        console.print(ids, highlight=False, soft_wrap=True)  # ids are copied: never broken
        console.print(Padding(Text(f"{arch}; {kinds}; {stands_in_for}", style="dim"),
                              (0, 0, 0, 4)))
    return 0


def _describe(name: str) -> tuple[str, ...]:
    """(name, architecture, dtype, params, fingerprint, layer kinds, stands in for)."""
    model_type = ZOO[name].model_type if name in ZOO else "llama"
    stands_in_for = ZOO[name].stands_in_for if name in ZOO else REAL[name].stands_in_for
    try:
        loaded = load(name)
    except RealModelMissing:
        return (name, model_type, "-", "-", "not installed", "-",
                f"{stands_in_for}; to add it: {REAL[name].install_hint}")
    return (name, model_type, loaded.dtype + _quantization(loaded.config),
            f"{logical_param_count(loaded):,}", loaded.fingerprint, layer_kinds(loaded),
            stands_in_for)


def build_command(names: list[str], console: Console) -> int:
    """Build the named zoo models (all when `names` is empty) and print their directories."""
    unknown = [n for n in names if n not in zoo_names()]
    if unknown:
        console.print(
            f"[red]unknown zoo model(s): {', '.join(unknown)}[/red]; "
            f"choose from: {', '.join(zoo_names())}"
        )
        return 2
    for name in names or zoo_names():
        try:
            path = resolve(name)
        except RealModelMissing:
            if names:  # asked for by name: an error (cli.main prints it on one line)
                raise
            path = f"not installed: {REAL[name].install_hint}"
        console.print(f"{name:12} {path}", highlight=False, soft_wrap=True)
    return 0


def import_dir_name(path: Path, name: str | None = None) -> str:
    """`<name>-<hash12>`, the hash over the file's bytes and the conversion recipe."""
    blob = {"recipe": GGUF_RECIPE_VERSION, "sha256": file_sha256(path)}
    digest = hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()
    return f"{name or path.stem.lower()}-{digest[:12]}"


def import_gguf(path: Path, name: str | None = None, root: Path | None = None) -> Path:
    """Convert the GGUF at `path` into `<root>/<name>-<hash12>` (atomically, once)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"{path}: no such file; pass the path of a .gguf file")
    root = Path(root) if root is not None else cache_root() / "zoo" / "imported"
    source = {"sha256": file_sha256(path)}
    return build_atomically(root / import_dir_name(path, name),
                            lambda tmp: write_gguf_model(path, tmp, source=source))


def import_command(args: argparse.Namespace, console: Console) -> int:
    target = import_gguf(args.file, args.name)
    loaded = load(str(target))
    console.print(
        f"{target}\n{loaded.config['num_hidden_layers']} layers, {loaded.dtype}"
        f"{_quantization(loaded.config)}, {logical_param_count(loaded):,} params, fingerprint "
        f"{loaded.fingerprint}; use it as --model {target}",
        highlight=False,
        soft_wrap=True,  # the path is for copying: never broken across lines
    )
    return 0
