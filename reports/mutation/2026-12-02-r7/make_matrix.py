"""matrices/default.toml less the real model's sweeps (its GGUF cannot reach the H200
machine: loading the matrix would fetch it), as ``mutation-default.toml`` of rounds 2-6.

    R=reports/mutation/2026-12-02-r7; python $R/make_matrix.py > $R/mutation-default.toml
"""

import re
from pathlib import Path

text = Path("matrices/default.toml").read_text()
head, *sweeps = re.split(r"\n(?=\[\[sweep\]\])", text)
kept = [s for s in sweeps if not re.search(r'^models = \[[^\]]*"smollm2-135m"', s, re.M)]
print("\n".join([head, *kept]), end="")
