"""Bench reports: the CSV is the source; the Markdown table and the plot derive from it.

    reports/bench/<backend>/<model>.csv   one Result per (B, engine)
    reports/bench/<backend>/<model>.md    per B: ms/step and tok/s per engine, ratio, roofline
    reports/bench/<backend>/<model>.png   aggregate tok/s vs B, log-log, with the roofline
    reports/bench/<backend>/summary.md    every model of the folder (``batchlab bench report``)
"""

from __future__ import annotations

import csv
import dataclasses
import re
import typing
from pathlib import Path

from batchlab.bench.engines import BATCH_GENERATOR, GENERATE_STEP, L1
from batchlab.bench.measure import (
    SINGLE_STREAM_TARGET,
    SLOWER_ALPHA,
    Result,
    holm,
    repeats_for_family,
)

FIELDS = [f.name for f in dataclasses.fields(Result)]
_TYPES = typing.get_type_hints(Result)


def file_stem(model: str) -> str:
    """A file name for a model name: ``qwen3-0.6b@L2`` -> ``qwen3-0.6b-L2``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-")


def write_csv(path: Path, results: list[Result]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for r in results:
            writer.writerow({k: "" if v is None else v for k, v in dataclasses.asdict(r).items()})


def read_csv(path: Path) -> list[Result]:
    with open(path, newline="") as f:
        return [Result(**{k: _parse(k, v) for k, v in row.items() if k in _TYPES})
                for row in csv.DictReader(f)]


def _parse(field: str, text: str):
    kind = _TYPES[field]
    if text == "":
        return None
    if kind is int:
        return int(text)
    if kind is str:
        return text
    return float(text)  # float and float | None


def engines_of(results: list[Result]) -> list[str]:
    """Batch engines in table order: batchlab paths first, then BatchGenerator."""
    names = list(dict.fromkeys(r.engine for r in results if r.engine != GENERATE_STEP))
    return sorted(names, key=lambda e: e == BATCH_GENERATOR)


def markdown(results: list[Result], level: int = 1) -> str:
    """One model's section: a header of the setup, the B=1 story, the per-B table."""
    first = results[0]
    by = {(r.batch, r.engine): r for r in results}
    engines = engines_of(results)
    paths = [e for e in engines if e != BATCH_GENERATOR]
    lines = [f"{'#' * level} {first.model} on {first.backend}", ""]
    bw = f"{first.bandwidth_gbs:.3g} GB/s" if first.bandwidth_gbs else "unknown bandwidth"
    lines.append(
        f"Prompt {first.prompt_len}, {first.gen_len} generated tokens per row, greedy; "
        f"median of {first.repeats} interleaved repeats after a warm-up (ms/step shows "
        f"[min-max]; a ratio shows [min-max] of the same ratio within each repeat, and "
        f"**slower** where a one-sided Wilcoxon test over those paired ratios gives "
        f"p < {SLOWER_ALPHA} after Holm's correction over the path's B cells; a raw "
        f"p < {SLOWER_ALPHA} that does not survive it is shown as (p ...)). "
        f"Weights streamed per step {first.streamed_gb:.3g} GB at {bw}. "
        f"mlx {first.mlx}, mlx-lm {first.mlx_lm}."
    )
    lines += ["", *_single_stream(by, paths), ""]
    head = ["B"] + [f"{e} ms/step" for e in engines] + [f"{e} tok/s" for e in engines]
    head += [f"{p} / mlx-lm" for p in paths] + [f"{e} % roofline" for e in engines]
    head += ["prefill tok/s (" + " / ".join(engines) + ")", "peak GB"]
    # every other path against l1 in the same run, where l1 ran: its step time over l1's
    # (> 1: slower; paired by repeat where the CSV has it) and its prefill tok/s over
    # l1's (< 1: slower), medians
    beside_l1 = [p for p in paths if p != L1] if L1 in paths else []
    head += [f"{p} time / l1" for p in beside_l1] + [f"{p} prefill / l1" for p in beside_l1]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    family = family_p(results)
    for batch in sorted({r.batch for r in results}):
        row = [by.get((batch, e)) for e in engines]
        cells = [str(batch)]
        cells += [_ms(r) for r in row] + [_num(r and r.tok_s) for r in row]
        cells += [_ratio_spread(by.get((batch, p)), family) for p in paths]
        cells += [_pct(r and r.roofline_pct) for r in row]
        cells += [" / ".join(_num(r and r.prefill_tok_s) for r in row)]
        cells += [f"{max(r.peak_gb for r in row if r):.3g}"]
        l1 = by.get((batch, L1))
        cells += [_time_over_l1(by.get((batch, p)), l1) for p in beside_l1]
        cells += [_over(by.get((batch, p)), l1, "prefill_tok_s", "") for p in beside_l1]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _single_stream(by: dict, paths: list[str]) -> list[str]:
    single = by.get((1, GENERATE_STEP))
    if single is None:
        return ["(no B=1 row: generate_step not measured)"]
    out = [(f"B=1 single stream: mlx-lm `generate_step` {_ms(single)} ms/step "
            f"({_num(single.tok_s)} tok/s, {_pct(single.roofline_pct)} of roofline); "
            f"BatchGenerator {_ms(by[(1, BATCH_GENERATOR)])} ms/step.")]
    for p in paths:
        r = by.get((1, p))
        if r:
            verdict = "within" if r.ratio_vs_generate_step >= SINGLE_STREAM_TARGET else "NOT within"
            out.append(f"{p} at B=1: {_ratio(r.ratio_vs_generate_step)} generate_step's "
                       f"speed ({verdict} the 5% target), {_ratio(r.ratio_vs_mlx_lm)} "
                       "BatchGenerator's.")
    return [" ".join(out)]


def sig(x: float) -> str:
    """3 significant digits, never an exponent: 0.0426, 1.47, 187, 1350."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _ms(r: Result | None) -> str:
    if r is None:
        return ""
    return f"{sig(r.ms_step)} [{sig(r.ms_step_min)}-{sig(r.ms_step_max)}]"


def _num(x) -> str:
    if not x:
        return ""
    return f"{x / 1e3:.1f}k" if x >= 1e4 else f"{x:.0f}"


def _ratio(x) -> str:
    return f"{x:.2f}x" if x else ""


def _time_over_l1(r: Result | None, l1: Result | None) -> str:
    """``r``'s step over l1's in the same repeat, median [min-max] over the repeats; the
    ratio of the medians where the runs were not paired (CSVs from before the pairing)."""
    if r is None or r.l1_ratio is None:
        return _over(r, l1, "ms_step", "x")
    return f"{r.l1_ratio:.2f}x [{r.l1_ratio_min:.2f}-{r.l1_ratio_max:.2f}]"


def _over(r: Result | None, l1: Result | None, field: str, unit: str) -> str:
    """``r``'s ``field`` over l1's at the same B, or blank where either is missing."""
    mine, theirs = getattr(r, field, None), getattr(l1, field, None)
    return f"{mine / theirs:.2f}{unit}" if mine and theirs else ""


def _ratio_spread(r: Result | None, family: dict) -> str:
    """The ratio of medians, with the spread of the per-repeat ratios where known."""
    if r is None:
        return ""
    if r.ratio_min is None:
        return _ratio(r.ratio_vs_mlx_lm)
    text = f"{_ratio(r.ratio_vs_mlx_lm)} [{r.ratio_min:.2f}-{r.ratio_max:.2f}]"
    if _slower(r, family):
        return text + " **slower**"
    if r.slower_p is not None and r.slower_p < SLOWER_ALPHA:
        return text + f" (p {r.slower_p:.3f})"
    return text


def family_p(results: list[Result]) -> dict[tuple[int, str], float]:
    """Holm-adjusted "slower" p-values, (B, engine) -> p, each path's B cells a family."""
    out = {}
    for engine in {r.engine for r in results}:
        tested = [r for r in results if r.engine == engine and r.slower_p is not None]
        for r, p in zip(tested, holm([r.slower_p for r in tested])):
            out[(r.batch, r.engine)] = p
    return out


def _slower(r: Result, family: dict) -> bool:
    p = family.get((r.batch, r.engine))
    return p is not None and p < SLOWER_ALPHA


def _pct(x) -> str:
    return f"{x:.0f}%" if x else ""


def write_plot(path: Path, results: list[Result]) -> None:
    """Aggregate tok/s vs B (log-log), error bars min-max."""
    import matplotlib

    matplotlib.use("Agg")  # no display on CI or GPU machines
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for engine in engines_of(results) + [GENERATE_STEP]:
        rs = sorted((r for r in results if r.engine == engine), key=lambda r: r.batch)
        if not rs:
            continue
        x = [r.batch for r in rs]
        y = [r.tok_s for r in rs]
        # tok/s of the slowest and fastest repeat (step times invert); clamped at 0
        # because tok/s is a median of its own and rounding can cross the extremes
        err = [[max(0.0, r.tok_s - r.batch * 1e3 / r.ms_step_max) for r in rs],
               [max(0.0, r.batch * 1e3 / r.ms_step_min - r.tok_s) for r in rs]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=engine)
    first = results[0]
    batches = sorted({r.batch for r in results})
    if first.bandwidth_gbs:
        bound_s = first.streamed_gb / first.bandwidth_gbs
        ax.plot(batches, [b / bound_s for b in batches], "k--", lw=1,
                label=f"weight-streaming bound ({first.bandwidth_gbs:.0f} GB/s)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_yscale("log")
    ax.set_xlabel("batch size B")
    ax.set_ylabel("aggregate decode tok/s")
    ax.set_title(f"{first.model} on {first.backend} (prompt {first.prompt_len}, "
                 f"{first.gen_len} tokens)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_model_report(folder: Path, results: list[Result]) -> list[Path]:
    """CSV, Markdown and PNG of one model; the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    # not Path.with_suffix: "qwen3-0.6b" has a dot that is no suffix
    csv_path, md_path, png_path = (folder / f"{file_stem(results[0].model)}.{ext}"
                                   for ext in ("csv", "md", "png"))
    write_csv(csv_path, results)
    md_path.write_text(markdown(results))
    write_plot(png_path, results)
    return [csv_path, md_path, png_path]


def write_summary(folder: Path) -> tuple[Path, int]:
    """Rebuild every model's MD/PNG from its CSV and a combined ``summary.md``."""
    csvs = sorted(Path(folder).glob("*.csv"))
    if not csvs:
        raise ValueError(f"no bench CSV in {folder}; run `batchlab bench --model ...` first")
    sections, overview = [], []
    for path in csvs:
        results = read_csv(path)
        if not results:
            continue
        write_model_report(folder, results)
        sections.append(markdown(results, level=2))
        overview += _overview_rows(results, f"{path.stem}.png")
    head = ["model", "path", "B=1 / generate_step", "B=1 / BatchGenerator",
            "/ BatchGenerator (min-max over B)", f"B slower (Holm p < {SLOWER_ALPHA})",
            "best tok/s (B)", "B=1 % roofline"]
    intro = ("Decode throughput of batchlab's paths against mlx-lm in the same process "
             "(ratios >1: batchlab faster). Regenerate with `batchlab bench report`.")
    text = [f"# batchlab bench: {Path(folder).name}", "", intro, "",
            "| " + " | ".join(head) + " |", "|" + " --- |" * len(head), *overview, ""]
    out = Path(folder) / "summary.md"
    out.write_text("\n".join(text) + "\n" + "\n".join(sections))
    return out, len(sections)


def _slower_cells(mine: list[Result]) -> str:
    """The B where the path lost significantly (Holm over its B cells), of the B where
    the test could run; raw p < alpha cells that do not survive the correction follow."""
    tested = [r for r in mine if r.slower_p is not None]
    if not tested:
        return "not tested"
    needed, repeats = repeats_for_family(len(tested)), min(r.repeats for r in tested)
    if repeats < needed:
        return f"not testable over {len(tested)} B with {repeats} repeats (needs {needed})"
    family = family_p(tested)
    slower = [str(r.batch) for r in tested if _slower(r, family)]
    raw = [str(r.batch) for r in tested if r.slower_p < SLOWER_ALPHA and not _slower(r, family)]
    text = f"{', '.join(slower) if slower else 'none'} (of {len(tested)})"
    return text + (f"; raw p < {SLOWER_ALPHA} at B {', '.join(raw)}" if raw else "")


def _overview_rows(results: list[Result], png: str) -> list[str]:
    """One row per batchlab path of a model (BatchGenerator is the yardstick)."""
    rows = []
    for path in engines_of(results):
        if path == BATCH_GENERATOR:
            continue
        mine = [r for r in results if r.engine == path]
        one = next((r for r in mine if r.batch == 1), None)
        best = max(mine, key=lambda r: r.tok_s)
        ratios = [r.ratio_vs_mlx_lm for r in mine]
        cells = [f"[{results[0].model}]({png})", path,
                 _ratio(one and one.ratio_vs_generate_step), _ratio(one and one.ratio_vs_mlx_lm),
                 f"{min(ratios):.2f}-{max(ratios):.2f}x", _slower_cells(mine),
                 f"{_num(best.tok_s)} ({best.batch})", _pct(one and one.roofline_pct)]
        rows.append("| " + " | ".join(cells) + " |")
    return rows
