"""Where the zoo keeps what it builds and fetches."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$BATCHLAB_CACHE`, else `~/.cache/batchlab`."""
    env = os.environ.get("BATCHLAB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "batchlab"
