"""Checks a matrix passes before anything runs: names that fit in an id, ids in the vocab.

A cell id is ``/``-separated and doubles as a golden file name, so every part of it must be
a plain name; a token id outside ``0 .. vocab-1`` reads past the embedding table (garbage
that changes from run to run, or a segfault for a large id), so it is refused up front.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from batchlab.cells.cell import Cell, model_label

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*(@w[0-9]+)?$")  # zoo variants: gemma3@w4


def check_name(name, what: str, where: str, model: bool = False) -> str:
    """``name`` unchanged, or a ValueError saying which characters an id part may have.
    A model may be a directory path: only its last component goes into the id."""
    text = model_label(name) if model and isinstance(name, str) else name
    if not isinstance(text, str) or not (_MODEL if model else _NAME).match(text):
        raise ValueError(
            f"{where}: {what} {name!r} cannot be part of a cell id; use letters, digits and "
            "_ . + - (starting with a letter or digit; no '/', spaces or commas)")
    return name


@functools.cache
def vocab_size(model: str) -> int | None:
    """The model's vocabulary size from its spec or config.json; None if it cannot be read
    without loading weights (then the ids are not checked here)."""
    from batchlab.zoo import ZOO, resolve
    from batchlab.zoo.variants import base_name

    if base_name(model) in ZOO:
        config = ZOO[base_name(model)].config
    else:
        from batchlab.zoo.real import REAL

        folder = resolve(model) if model in REAL else Path(model).expanduser()
        path = folder / "config.json"
        if not path.is_file():
            return None
        config = json.loads(path.read_text())
    size = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    return int(size) if size else None


def check_prompt_ids(cell: Cell, where: str) -> None:
    size = vocab_size(cell.model)
    if size is None:
        return
    for row in cell.rows:
        bad = [t for t in row.prompt if not 0 <= t < size]
        if bad:
            raise ValueError(
                f"{where}: row {row.name} of {cell.id} has token ids {bad[:5]} outside "
                f"0..{size - 1} (the vocabulary of {cell.model}); use ids in that range")
    k = cell.sampling.top_k
    if k >= size:
        raise ValueError(f"{where}: sampling top_k {k} must be below the vocabulary size "
                         f"{size} of {cell.model} (mlx-lm refuses it)")
