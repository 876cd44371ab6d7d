"""Where batchlab finds its matrices and goldens by default: constants many commands share.

A source checkout (an editable install, or ``python -m batchlab`` from its root) uses the
checkout's own ``matrices/`` and ``goldens/``, from whatever folder a command runs in. A
non-editable install (``pip install .``) carries the code only: run it from a checkout's
root, where the current directory holds them, or pass ``--matrix`` and ``--goldens``.
"""

from __future__ import annotations

import os
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _project_root() -> Path:
    """The checkout this package sits in, else the current directory."""
    if (_SOURCE_ROOT / "matrices" / "default.toml").is_file():
        return _SOURCE_ROOT
    return Path.cwd().resolve()


PROJECT_ROOT = _project_root()
DEFAULT_MATRIX = PROJECT_ROOT / "matrices" / "default.toml"
DEFAULT_GOLDENS = PROJECT_ROOT / "goldens"

# seconds running rows get to finish when the server is asked to stop (batchlab serve)
DEFAULT_GRACE_S = 30.0

# finished requests' caches the server keeps for reuse (mlx_lm.server's --prompt-cache-size)
DEFAULT_PROMPT_CACHE_SIZE = 10

# worker processes of `matrix run` and `golden regen`: the cores this process may use
DEFAULT_JOBS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
    os.cpu_count() or 1)
