"""Each matrix file expanded once per test process: ``matrix_cells("matrices/default.toml")``.

``load_matrix`` expands the default matrix's sweeps into 2236 cells in ~1 s; the suite
read it ~15 times per run (collection included), the same cells each time. Cells are
frozen, and each caller gets its own list. A test of ``load_matrix`` itself calls it.
"""

from __future__ import annotations

from pathlib import Path

from batchlab.cells.cell import Cell
from batchlab.cells.spec import load_matrix
from batchlab.defaults import PROJECT_ROOT

_LOADED: dict[tuple[Path, int, int], tuple[Cell, ...]] = {}


def matrix_cells(path: str | Path) -> list[Cell]:
    """``load_matrix(path)``; a path relative to the project root, like the tests'.
    Keyed by the file's mtime and size too: a test that rewrites a matrix reads it anew."""
    full = (PROJECT_ROOT / path).resolve()
    stat = full.stat()
    key = (full, stat.st_mtime_ns, stat.st_size)
    if key not in _LOADED:
        _LOADED[key] = tuple(load_matrix(full))
    return list(_LOADED[key])
