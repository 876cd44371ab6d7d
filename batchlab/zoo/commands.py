"""`batchlab zoo list` and `batchlab zoo build [NAME...]` (wired up in batchlab/cli.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from batchlab.zoo.load import cache_root, layer_kinds, load, param_count, resolve
from batchlab.zoo.specs import ZOO


def list_command(console: Console) -> int:
    """One row per zoo model, building any not yet in the cache (a second or so each)."""
    table = Table(title=f"batchlab zoo ({cache_root() / 'zoo'})")
    # Ids never wrap (they are what one copies); the prose columns take what width is left.
    for column in ("name", "architecture", "dtype", "params", "fingerprint"):
        table.add_column(column, no_wrap=True, justify="right" if column == "params" else "left")
    table.add_column("layer kinds")
    table.add_column("stands in for")
    for name, spec in ZOO.items():
        loaded = load(name)
        table.add_row(
            name,
            spec.model_type,
            loaded.dtype,
            f"{param_count(loaded):,}",
            loaded.fingerprint,
            layer_kinds(loaded),
            spec.stands_in_for,
        )
    console.print(table)
    return 0


def build_command(names: list[str], console: Console) -> int:
    """Build the named zoo models (all when `names` is empty) and print their directories."""
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        console.print(
            f"[red]unknown zoo model(s): {', '.join(unknown)}[/red]; choose from: {', '.join(ZOO)}"
        )
        return 2
    for name in names or list(ZOO):
        console.print(f"{name:12} {resolve(name)}")
    return 0
