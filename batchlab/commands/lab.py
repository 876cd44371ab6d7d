"""``batchlab lab kl``: teacher-forced KL of engine paths against a reference path.

    batchlab lab kl --paths kv8,kv4,kvmix                  # a corpus slice (the CPU default)
    batchlab lab kl --paths kv8,kv4,kvmix --rows 0 --batch 16 --length 512   # whole corpus

Rows are consecutive slices of the real-text corpus (``batchlab/zoo/corpus.toml``) in the
model's tokens: the first ``--context`` ids of a row are its prompt, the rest are forced
(``lab/run.py``). ``--rows 0`` takes as many rows as the corpus holds. The batch holds
``--batch`` rows; the rest queue and join as rows finish (ragged rows, joins). The report
(``lab/report.py``): Markdown, CSV, JSON and a PNG under ``--out``, plus the KV bytes
per row of each path (``lab/density.py``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from batchlab.defaults import PROJECT_ROOT


def add_lab_parser(sub) -> None:
    lab = sub.add_parser("lab", help="lab measurements of the engine's paths").add_subparsers(
        dest="lab_command", required=True)
    kl = lab.add_parser("kl", help="teacher-forced KL of paths against a reference path "
                        "(llama.cpp's --kl-divergence statistics)", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    kl.add_argument("--model", default="smollm2-135m", help="zoo name or model dir")
    kl.add_argument("--paths", default="kv8,kv4,kvmix", help="paths to score, comma list")
    kl.add_argument("--reference", default="l1", help="the reference path (default l1: bf16 KV)")
    kl.add_argument("--rows", type=int, default=6, help="corpus rows (0: the whole corpus)")
    kl.add_argument("--length", type=int, default=64, help="ids per row (odd rows 1/8 fewer)")
    kl.add_argument("--context", type=int, default=32, help="prompt ids per row (not scored)")
    kl.add_argument("--offset", type=int, default=0, help="corpus token where rows start")
    kl.add_argument("--batch", type=int, default=4, help="rows decoding at once")
    kl.add_argument("--prefill-step-size", type=int, default=2048)
    kl.add_argument("--out", type=Path, default=None,
                    help="report folder (default: reports/lab/kl/<model>-<backend key>)")
    kl.set_defaults(func=kl_command)


def kl_command(args, console) -> int:
    from batchlab.backend import backend_key
    from batchlab.engine.paths.registry import resolve_path
    from batchlab.lab.density import density_markdown
    from batchlab.lab.report import summarize, write_report
    from batchlab.lab.run import teacher_forced, text_rows
    from batchlab.zoo import load
    from batchlab.zoo.corpus import corpus_tokens

    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    for p in [args.reference, *paths]:
        resolve_path(p)
    if args.context < 1 or args.context >= args.length:
        raise ValueError("--context must be >= 1 and below --length")
    loaded = load(args.model)
    tokens = corpus_tokens(args.model)
    rows = text_rows(tokens, rows=args.rows or len(tokens), length=args.length,
                     context=args.context, start=args.offset)
    scored = sum(len(r.ids) - r.context for r in rows)
    console.print(f"{len(rows)} rows, {scored} forced ids, B={args.batch}, paths "
                  f"{', '.join(paths)} against {args.reference} on {args.model}")
    start = time.perf_counter()
    last = [0.0]

    def progress(done: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 30:
            last[0] = now
            console.print(f"  {done}/{scored} positions, {now - start:.0f} s")

    scores = teacher_forced(loaded.model, rows, paths, args.reference, batch=args.batch,
                            prefill_step_size=args.prefill_step_size, progress=progress)
    seconds = time.perf_counter() - start
    summaries = [summarize(p, args.reference, scores[p]) for p in paths if p != args.reference]
    out = args.out or PROJECT_ROOT / "reports" / "lab" / "kl" / f"{args.model}-{backend_key()}"
    header = (f"Model `{args.model}` ({loaded.dtype}), backend `{backend_key()}`: {len(rows)} "
              f"rows of the corpus from token {args.offset} ({args.length} ids, odd rows "
              f"{args.length - args.length // 8}; the first {args.context} of each are the "
              f"prompt, the rest forced and scored: {scored} positions), B={args.batch} with "
              f"the other rows queued and joining. {seconds:.0f} s.\n\nCommand: `batchlab lab "
              f"kl --model {args.model} --paths {args.paths} --reference {args.reference} "
              f"--rows {args.rows} --length {args.length} --context {args.context} --offset "
              f"{args.offset} --batch {args.batch}`")
    meta = {"model": args.model, "backend": backend_key(), "rows": len(rows),
            "length": args.length, "context": args.context, "offset": args.offset,
            "batch": args.batch, "seconds": round(seconds, 1)}
    density = density_markdown(loaded.model, [args.reference, *paths])
    written = write_report(out, summaries, {p: scores[p] for p in paths}, header, meta, density)
    for s in summaries:
        console.print(f"{s.path:8} KL mean {s.kl_mean:.5f} ± {s.kl_stderr:.5f}  median "
                      f"{s.kl_median:.5f}  p99 {s.kl_p99:.5f}  max {s.kl_max:.4f}  same top-1 "
                      f"{s.same_top1:.2%}  Δp RMS {s.dp_rms:.5f}  PPL ratio {s.ppl_ratio:.5f}",
                      highlight=False)
    console.print("report: " + ", ".join(str(p) for p in written), highlight=False)
    return 0
