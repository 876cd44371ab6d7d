"""``batchlab bench``: decode throughput vs B, batchlab's paths against mlx-lm in one run.

    batchlab bench --model llama-3.2-1b,qwen3-0.6b --batch 1,2,4,...,256 \\
        --prompt-len 128 [--gen-len 256] [--paths l1] [--repeats 8] [--bandwidth GBPS]
    batchlab bench report      # rebuild <model>.md/.png and summary.md from the CSVs
    batchlab bench profile --model llama-3.2-1b --batch 1,8 [--paths l1,fast]
                               # where a decode step's time goes, per engine
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path


def add_bench_parser(sub) -> None:
    p = sub.add_parser(
        "bench", help="decode throughput vs B against mlx-lm (same process, interleaved)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", nargs="?", choices=("run", "report", "profile"), default="run",
                   help="run the bench (default), rebuild the reports from the CSVs, or "
                   "profile a decode step (forward build, MLX submit, the rest, device "
                   "wait) per engine into <out>/profile/<model>.md")
    p.add_argument("--model", default=None,
                   help="comma list of shapes (llama-3.2-1b, llama-3.1-8b, qwen3-0.6b, "
                   "gemma3-4b; <shape>@L2 keeps 2 layers), zoo names or model dirs")
    p.add_argument("--batch", default="1,2,4,8,16,32", help="batch sizes, comma list")
    p.add_argument("--prompt-len", type=int, default=128, help="prompt tokens per row")
    p.add_argument("--gen-len", type=int, default=256,
                   help="generated tokens per row: the decode window (a window of 64 steps "
                   "on a 2-core CPU caught OS hiccups in some repeats only)")
    p.add_argument("--paths", default="l1",
                   help="batchlab paths to time, comma list: l1, fast (l1 minus all-True "
                   "decode masks; see engine/paths/fast/), compiled (a traced decode "
                   "forward, full-attention models; see engine/paths/compiled.py), "
                   "invariant (each row equal to itself alone; see engine/paths/invariant/)")
    p.add_argument("--repeats", type=int, default=8,
                   help="timed runs per engine and B (8: enough for the 'slower' test to "
                   "flag a cell among up to 9 B, Holm-corrected)")
    p.add_argument("--bandwidth", type=float, default=None,
                   help="memory bandwidth in GB/s for the roofline (default: measured)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
    p.add_argument("--out", type=Path, default=None,
                   help="report folder (default: reports/bench/<backend key>)")
    p.set_defaults(func=bench_command)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        msg = f"--batch wants a comma list of ints, e.g. 1,2,4,8; got {text!r}"
        raise ValueError(msg) from None


def _default_out() -> Path:
    from batchlab.backend import backend_key
    from batchlab.defaults import PROJECT_ROOT

    return PROJECT_ROOT / "reports" / "bench" / backend_key()


def bench_command(args, console) -> int:
    from batchlab.bench.report import write_summary
    from batchlab.display import shown

    out = args.out or _default_out()
    if args.action == "report":
        path, n = write_summary(out)
        console.print(f"rebuilt {n} model report(s) and {shown(path)}", highlight=False)
        return 0
    if not args.model:
        raise ValueError("batchlab bench needs --model (a shape, zoo name or model dir)")
    from batchlab.bench.measure import BenchSpec
    from batchlab.bench.shapes import check_model_name

    spec = BenchSpec(batches=_ints(args.batch), prompt_len=args.prompt_len,
                     gen_len=args.gen_len, paths=tuple(args.paths.split(",")),
                     repeats=args.repeats, seed=args.seed)
    models = [m.strip() for m in args.model.split(",") if m.strip()]
    for name in models:  # fail on a typo before any model is built or timed
        check_model_name(name)
    if args.action == "profile":
        for name in models:
            _profile_model(name, spec, out, console)
        return 0
    bandwidth = _bandwidth(args.bandwidth, console)
    failed, path = [], None
    for name in models:
        try:
            _bench_model(name, spec, bandwidth, out, console)
        except Exception as err:  # noqa: BLE001 - e.g. out of memory: the others still run
            failed.append(name)
            console.print(f"[bold red]{name} failed:[/] {type(err).__name__}: {err}",
                          highlight=False)
            console.print_exception(max_frames=8)
        # after every model, so a run cut short (timeout) still leaves a summary
        path, _ = write_summary(out) if any(out.glob("*.csv")) else (None, 0)
    if path:
        console.print(f"summary: {shown(path)}", highlight=False)
    if failed:
        console.print(f"[bold red]{len(failed)} model(s) failed:[/] {', '.join(failed)}")
    return 1 if failed else 0


def _bandwidth(given: float | None, console) -> float:
    from batchlab.bench.roofline import measure_bandwidth

    if given is not None:
        if given <= 0:
            raise ValueError("--bandwidth must be > 0 (GB/s)")
        return given * 1e9
    measured = measure_bandwidth()
    console.print(f"memory bandwidth (copy benchmark): {measured / 1e9:.0f} GB/s",
                  highlight=False, soft_wrap=True)
    return measured


def _bench_model(name: str, spec, bandwidth: float, out: Path, console) -> None:
    start = time.perf_counter()
    _with_model(name, console,
                lambda loaded: _bench_loaded(loaded, spec, bandwidth, out, console, start))


def _bench_loaded(loaded, spec, bandwidth: float, out: Path, console, start: float) -> None:
    from batchlab.backend import backend_key, versions
    from batchlab.bench.measure import summarize, sweep
    from batchlab.bench.report import write_model_report
    from batchlab.bench.roofline import bound_seconds, weight_bytes
    from batchlab.display import shown

    weights = weight_bytes(loaded.model)
    bound_s = bound_seconds(weights.streamed, bandwidth)
    console.print(
        f"[bold]{loaded.name}[/] ({loaded.kind}, {loaded.dtype}): {weights.total / 1e9:.3g} GB "
        f"of weights, {weights.streamed / 1e9:.3g} GB streamed per step -> B=1 bound "
        f"{bound_s * 1e3:.3g} ms/step; ready in {time.perf_counter() - start:.1f} s",
        highlight=False, soft_wrap=True)
    spec = _paths_for(loaded.model, loaded.name, spec, console)
    with _Progress(console, spec.num_runs(), loaded.name) as progress:
        runs = sweep(loaded.model, spec, loaded.vocab_size, on_run=progress.on_run,
                     on_batch=progress.on_batch)
    results = summarize(runs, model=loaded.name, backend=backend_key(), spec=spec,
                        bound_s=bound_s, bandwidth=bandwidth, streamed_bytes=weights.streamed,
                        versions=versions())
    written = write_model_report(out, results)
    _print_table(console, results)
    console.print("wrote " + ", ".join(shown(p) for p in written), highlight=False,
                  soft_wrap=True)


def _with_model(name: str, console, use) -> None:
    """Load a bench model (shape, zoo name or dir), ``use(loaded)``, then give its memory
    back: the next model gets it (an 8B shape holds 16 GB). Nothing else may keep a
    reference, hence a function call rather than a ``with`` block."""
    import mlx.core as mx

    from batchlab.bench.shapes import load_model

    with console.status(f"loading {name} ..."):
        loaded = load_model(name)
    try:
        use(loaded)
    finally:
        del loaded
        gc.collect()
        mx.clear_cache()


def _profile_model(name: str, spec, out: Path, console) -> None:
    _with_model(name, console, lambda loaded: _profile_loaded(loaded, spec, out, console))


def _profile_loaded(loaded, spec, out: Path, console) -> None:
    from batchlab.atomic import write_text_atomic
    from batchlab.backend import backend_key, versions
    from batchlab.bench.profile import markdown, num_runs, profile
    from batchlab.display import shown

    spec = _paths_for(loaded.model, loaded.name, spec, console)
    with _Progress(console, num_runs(spec), loaded.name) as progress:
        profiles = profile(loaded.model, spec, loaded.vocab_size, on_run=progress.on_run)
    v = versions()
    text = markdown(loaded.name, backend_key(), spec, profiles,
                    f"mlx {v['mlx']}, mlx-lm {v['mlx_lm']}")
    path = out / "profile" / f"{loaded.name}.md"
    write_text_atomic(path, text)
    console.print(text, soft_wrap=True, markup=False, highlight=False)
    console.print(f"wrote {shown(path)}", highlight=False, soft_wrap=True)


def _paths_for(model, name: str, spec, console):
    """``spec`` without the paths that refuse ``model`` (each refusal is printed)."""
    from dataclasses import replace

    from batchlab.engine.paths.registry import Unsupported, resolve_path

    kept = []
    for path in spec.paths:
        try:
            resolve_path(path, model, model_name=name, use="time")
        except Unsupported as err:
            console.print(f"{name}: skipping path {path}: {err.reason}", highlight=False,
                          soft_wrap=True)
        else:
            kept.append(path)
    return replace(spec, paths=tuple(kept))


class _Progress:
    """A rich bar over every run of one model, and one line per finished B (which is
    all a non-terminal log, e.g. the GPU machine's, shows)."""

    def __init__(self, console, total: int, model: str):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.model = model
        self.progress = Progress(
            TextColumn(f"[bold]{model}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.description}"),
            console=console, disable=not console.is_terminal)
        self.task = self.progress.add_task("", total=total)
        self.started = False

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:  # the last run has no successor to advance the bar for it
            self.progress.update(self.task, completed=self.progress.tasks[0].total)
        self.progress.stop()

    def on_run(self, engine: str, batch: int, label: str) -> None:
        if self.started:
            self.progress.advance(self.task)
        self.started = True
        self.progress.update(self.task, description=f"B={batch} {engine} {label}")

    def on_batch(self, batch: int, runs) -> None:
        import statistics

        from batchlab.bench.report import sig

        steps: dict[str, list[float]] = {}
        for r in runs:
            steps.setdefault(r.engine, []).append(r.step_s * 1e3)
        parts = [f"{e} {sig(statistics.median(v))} ms/step" for e, v in steps.items()]
        self.progress.console.print(f"{self.model} B={batch}: " + ", ".join(parts),
                                    highlight=False, soft_wrap=True)


def _print_table(console, results) -> None:
    from rich.table import Table

    from batchlab.bench.measure import SINGLE_STREAM_TARGET
    from batchlab.bench.report import markdown, sig

    if not console.is_terminal:  # a log (e.g. the GPU machine's): the Markdown, unwrapped
        console.print(markdown(results), soft_wrap=True, markup=False, highlight=False)
        return

    table = Table(title=f"{results[0].model} on {results[0].backend}")
    for col in ("B", "engine", "ms/step", "tok/s", "vs mlx-lm", "vs gen_step", "roofline",
                "prefill tok/s", "peak GB"):
        table.add_column(col, justify="right", no_wrap=True, min_width=3)
    for r in results:
        single = r.ratio_vs_generate_step
        style = "red" if single is not None and single < SINGLE_STREAM_TARGET else "green"
        table.add_row(
            str(r.batch), r.engine, sig(r.ms_step), f"{r.tok_s:.0f}",
            f"{r.ratio_vs_mlx_lm:.2f}x", f"[{style}]{single:.2f}x[/]" if single else "",
            f"{r.roofline_pct:.0f}%" if r.roofline_pct else "", f"{r.prefill_tok_s:.0f}",
            f"{r.peak_gb:.3g}")
    console.print(table)
