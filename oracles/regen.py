"""Regenerate the committed goldens of this backend for the default and quick matrices.

    python oracles/regen.py [--jobs N]

The oracle is mlx-lm's BatchGenerator (batchlab/oracle/batch.py), self-checked against
mlx-lm's serial path; goldens land in goldens/<backend-key>/.
"""

import argparse
import sys
from pathlib import Path

from batchlab.cli import main

ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", default="2")
    jobs = parser.parse_args().jobs
    status = 0
    for matrix in ("default", "quick"):
        status |= main(["golden", "regen", "--matrix", str(ROOT / "matrices" / f"{matrix}.toml"),
                        "--jobs", jobs])
    sys.exit(status)
