"""The ``lab kl`` report: llama.cpp's ``--kl-divergence`` statistics per path, written as
Markdown, CSV, JSON and a PNG of the KL distributions.

Per path against the reference (llama.cpp's names in brackets):
  KL mean +- stderr, median, p90, p99, p99.9, max          [KL divergence]
  same top-1 %, with its stderr                             [Same top p]
  Δp = p_path(token) - p_ref(token) of the text's next id:
       mean, RMS, p1 / p5 / p50 / p95 / p99                 [Δp]
  PPL ratio = exp(mean NLL_path) / exp(mean NLL_ref)        [Mean PPL(Q)/PPL(base)]
  and mean ln(PPL ratio)                                    [Mean ln(PPL(Q)/PPL(base))]
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from batchlab.lab.run import Scores


@dataclass(frozen=True, slots=True, kw_only=True)
class KLSummary:
    path: str
    reference: str
    positions: int
    kl_mean: float
    kl_stderr: float
    kl_median: float
    kl_p90: float
    kl_p99: float
    kl_p999: float
    kl_max: float
    same_top1: float
    same_top1_stderr: float
    dp_mean: float
    dp_rms: float
    dp_p1: float
    dp_p5: float
    dp_p50: float
    dp_p95: float
    dp_p99: float
    ppl_ref: float
    ppl_path: float
    ppl_ratio: float
    ln_ppl_ratio: float

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(path: str, reference: str, s: Scores) -> KLSummary:
    kl, top = np.array(s.kl), np.array(s.same_top1, dtype=np.float64)
    dp = np.array(s.p_path) - np.array(s.p_ref)
    n = len(kl)
    if n == 0:
        raise ValueError(f"path {path}: no scored positions")
    nll_ref, nll_path = -np.mean(s.logp_ref), -np.mean(s.logp_path)
    q = lambda x, p: float(np.percentile(x, p))  # noqa: E731
    return KLSummary(
        path=path, reference=reference, positions=n,
        kl_mean=float(kl.mean()), kl_stderr=float(kl.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
        kl_median=q(kl, 50), kl_p90=q(kl, 90), kl_p99=q(kl, 99), kl_p999=q(kl, 99.9),
        kl_max=float(kl.max()),
        same_top1=float(top.mean()),
        same_top1_stderr=float(math.sqrt(top.mean() * (1 - top.mean()) / n)),
        dp_mean=float(dp.mean()), dp_rms=float(np.sqrt(np.mean(dp**2))),
        dp_p1=q(dp, 1), dp_p5=q(dp, 5), dp_p50=q(dp, 50), dp_p95=q(dp, 95), dp_p99=q(dp, 99),
        ppl_ref=float(math.exp(nll_ref)), ppl_path=float(math.exp(nll_path)),
        ppl_ratio=float(math.exp(nll_path - nll_ref)), ln_ppl_ratio=float(nll_path - nll_ref),
    )


ANCHORS = (
    "llama.cpp q8_0 K+V cache: ~0.001 mean KL (f16 noise floor ~0.0002)",
    "mlx-bun on MiniCPM5-1B: kv8 0.00246, kv4 0.0516 mean KL",
)


def markdown(rows: list[KLSummary], header: str, density: str = "") -> str:
    out = [f"# Teacher-forced KL against {rows[0].reference}", "", header, ""]
    out += ["| path | positions | KL mean ± stderr | median | p90 | p99 | p99.9 | max | "
            "same top-1 | Δp mean | Δp RMS | Δp p1 / p99 | PPL ratio |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- "
            "| ---: |"]
    for r in rows:
        out.append(
            f"| {r.path} | {r.positions} | {r.kl_mean:.5f} ± {r.kl_stderr:.5f} | "
            f"{r.kl_median:.5f} | {r.kl_p90:.5f} | {r.kl_p99:.5f} | {r.kl_p999:.5f} | "
            f"{r.kl_max:.5f} | {r.same_top1:.2%} ± {r.same_top1_stderr:.2%} | "
            f"{r.dp_mean:+.5f} | {r.dp_rms:.5f} | {r.dp_p1:+.4f} / {r.dp_p99:+.4f} | "
            f"{r.ppl_ratio:.5f} |")
    out += ["", f"Perplexity of the reference on these positions: {rows[0].ppl_ref:.3f}.", "",
            "Anchors (other engines, other models: orders of magnitude, not gates):", ""]
    out += [f"- {a}" for a in ANCHORS]
    if density:
        out += ["", density]
    return "\n".join(out) + "\n"


def write_report(out_dir: Path, rows: list[KLSummary], scores: dict[str, Scores],
                 header: str, meta: dict, density: str = "") -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "kl.md"
    md.write_text(markdown(rows, header, density))
    with open(out_dir / "kl.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].as_dict()))
        w.writeheader()
        for r in rows:
            w.writerow(r.as_dict())
    (out_dir / "kl.json").write_text(json.dumps(
        {"meta": meta, "paths": [r.as_dict() for r in rows]}, indent=2) + "\n")
    png = out_dir / "kl.png"
    plot(png, scores, rows[0].reference)
    return [md, out_dir / "kl.csv", out_dir / "kl.json", png]


def plot(png: Path, scores: dict[str, Scores], reference: str) -> None:
    """KL per position, one histogram per path, on log-spaced bins (KL spans decades)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    floor = 1e-7
    every = np.concatenate([np.maximum(np.array(s.kl), floor) for s in scores.values()])
    bins = np.logspace(np.log10(floor), np.log10(max(every.max(), 10 * floor)), 50)
    for path, s in scores.items():
        ax.hist(np.maximum(np.array(s.kl), floor), bins=bins, histtype="step", linewidth=1.5,
                label=f"{path} (mean {np.mean(s.kl):.2g})")
    ax.set_xscale("log")
    ax.set_xlabel(f"KL({reference} || path) per position, nats (values < {floor:g} at the left)")
    ax.set_ylabel("positions")
    ax.legend()
    ax.set_title("teacher-forced KL per position")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
