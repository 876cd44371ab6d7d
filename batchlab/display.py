"""How paths are shown to users: relative to where they stand, when possible."""

from __future__ import annotations

from pathlib import Path


def shown(path: Path) -> str:
    """A path as a user would type it from the current directory."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
