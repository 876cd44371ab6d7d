"""Sum an ``ncu --csv --page raw`` log of one decode step (step_kernels.py) by kernel class.

    python3 tools/h200/ncu_summary.py k.csv [label] [top kernels to list, 14]

Prints each class's launches and device time (us), and the step's total: the device
time of the step with every kernel serialized and timed alone.
"""

from __future__ import annotations

import csv
import re
import sys
from collections import defaultdict

CLASSES = [  # first match wins
    ("row chain (fast's one-row kernels)", r"batchlab_row_chain"),
    ("attention (grouped kernel)", r"batchlab_grouped_decode"),
    ("attention (MLX sdpa)", r"sdpa|attention|flash"),
    ("GEMM (cuBLASLt nvjet, split-K reduce)", r"nvjet|splitKreduce|gemm|cutlass|xmma"),
    ("GEMV (masked attention's matmuls, l1)", r"gemv|internal::kernel"),
    ("norms", r"rms|layer_norm|norm"),
    ("rope", r"rope"),
    ("softmax / logsumexp / argmax", r"logsumexp|softmax|arg_?reduce|argmax|reduce"),
    ("silu * up (compiled)", r"Sigmoid"),
    ("copies / slices / cache writes", r"copy|slice|scatter|gather|concat|fill"),
    ("elementwise", r"binary|unary|ternary|compiled|elementwise"),
]


def main() -> None:
    path = sys.argv[1]
    label = sys.argv[2] if len(sys.argv) > 2 else path
    with open(path) as f:
        lines = [ln for ln in f if ln.startswith('"')]
    rows = list(csv.reader(lines))
    header = rows[0]
    name_col = header.index("Kernel Name")
    time_col = header.index("gpu__time_duration.sum")
    by_class: dict[str, list[float]] = defaultdict(list)
    by_name: dict[str, list[float]] = defaultdict(list)
    for row in rows[1:]:
        try:
            t = float(row[time_col].replace(",", ""))
        except ValueError:
            continue  # the units row
        kernel = row[name_col]
        cls = next((c for c, pat in CLASSES if re.search(pat, kernel, re.I)), "other")
        by_class[cls].append(t)
        by_name[kernel[:110]].append(t)
    total = sum(sum(v) for v in by_class.values())
    print(f"== {label}: {sum(len(v) for v in by_class.values())} kernels, "
          f"{total / 1e3:.1f} us device time (ns column summed)")
    for cls, ts in sorted(by_class.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {cls:32s} {len(ts):5d} launches {sum(ts) / 1e3:10.1f} us "
              f"{100 * sum(ts) / total:5.1f}%")
    print("  top kernels:")
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 14
    for kernel, ts in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"    {sum(ts) / 1e3:9.1f} us {len(ts):4d}x  {kernel}")


if __name__ == "__main__":
    main()
