"""``batchlab load``: a concurrency sweep against OpenAI-compatible endpoints, side by side.

    batchlab load --target batchlab=http://127.0.0.1:8000 \
        --target mlx_lm=http://127.0.0.1:8080 --model MODEL \
        --concurrency 1,4,16,64 --requests 64 --prompt-len 64:16 --output-len 64:16

At each concurrency level C, ``--requests`` streamed completions are sent with at most C
in flight (closed loop: a finished request makes room for the next), after ``--warmup``
unmeasured rounds of C requests. Prompt and output
lengths are drawn from normal distributions (mean:sd, at least 1) with ``--seed``, the
same draws for every target. Each request's TTFT is the time to its first streamed
chunk, its inter-token latencies the gaps between later chunks (one a token on both
batchlab and mlx_lm.server); throughput is the output tokens of the level (the servers'
``usage``, asked for with ``stream_options``) over its wall time. Prints a table,
writes ``load.json`` and ``load.png`` (tok/s and TTFT p50 against C) under ``--out``.

The generator is the official ``openai`` client, not guidellm / aiperf / locust: see
docs/serving.md for why.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from batchlab.serve.load_stream import _one, _pct

WORDS = ["the", "of", "and", "to", "in", "is", "was", "for", "on", "as", "with", "by", "at",
         "from", "his", "her", "an", "were", "are", "which"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelResult:
    target: str
    concurrency: int
    requests: int
    errors: int
    error_kinds: dict[str, int]  # exception class -> count
    output_tokens: int
    seconds: float
    tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float


def _lengths(spec: str, n: int, rng: random.Random) -> list[int]:
    mean, _, sd = spec.partition(":")
    return [max(1, round(rng.gauss(float(mean), float(sd or 0)))) for _ in range(n)]


async def run_level(target: str, url: str, model: str, concurrency: int,
                    prompts: list[str], outputs: list[int]) -> LevelResult:
    from openai import AsyncOpenAI

    api = AsyncOpenAI(base_url=url.rstrip("/") + "/v1", api_key="none", max_retries=0,
                      timeout=600)
    gate = asyncio.Semaphore(concurrency)
    ttft, itl, kinds, tokens = [], [], {}, 0

    async def guarded(prompt, n):
        nonlocal tokens
        async with gate:
            try:
                start, stamps, count = await _one(api, model, prompt, n)
            except Exception as err:  # noqa: BLE001 - a failed request is counted, not fatal
                kinds[type(err).__name__] = kinds.get(type(err).__name__, 0) + 1
                return
        if stamps:
            ttft.append(stamps[0] - start)
            itl.extend(b - a for a, b in zip(stamps, stamps[1:]))
        tokens += count

    began = time.perf_counter()
    await asyncio.gather(*[guarded(p, n) for p, n in zip(prompts, outputs)])
    seconds = time.perf_counter() - began
    await api.close()
    return LevelResult(target=target, concurrency=concurrency, requests=len(prompts),
                       errors=sum(kinds.values()), error_kinds=kinds, output_tokens=tokens,
                       seconds=round(seconds, 3),
                       tokens_per_s=round(tokens / seconds, 1),
                       ttft_p50_ms=round(_pct(ttft, 0.5), 1),
                       ttft_p99_ms=round(_pct(ttft, 0.99), 1),
                       itl_p50_ms=round(_pct(itl, 0.5), 2), itl_p99_ms=round(_pct(itl, 0.99), 2))


def add_load_parser(sub) -> None:
    p = sub.add_parser("load", help="concurrency sweep against OpenAI-compatible servers",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", action="append", required=True, metavar="NAME=URL",
                   help="a server to load (repeat to compare side by side)")
    p.add_argument("--model", required=True, help="the model name the servers expect")
    p.add_argument("--concurrency", default="1,4,16,64", help="levels (default 1,4,16,64)")
    p.add_argument("--requests", type=int, default=64, help="requests per level (default 64)")
    p.add_argument("--prompt-len", default="64:16", help="prompt words, mean:sd (64:16)")
    p.add_argument("--output-len", default="64:16", help="max_tokens, mean:sd (64:16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the length draws (0)")
    p.add_argument("--warmup", type=int, default=1, metavar="K",
                   help="before each level, K unmeasured rounds of C requests (default 1): "
                        "a GPU backend compiles kernels for each new batch shape, which "
                        "would land in the first requests' TTFT; 0 measures cold")
    p.add_argument("--long-prompt", type=int, default=None, metavar="N",
                   help="instead of the sweep: at each level, C short streams in a closed "
                        "loop and one prompt of N token ids beside them; reports the short "
                        "streams' inter-token latency while it is admitted (long.json)")
    p.add_argument("--out", type=Path, default=Path("reports/load"), help="output folder")
    p.set_defaults(func=load_command)


def load_command(args, console) -> int:
    from rich.table import Table

    targets = [t.partition("=")[::2] for t in args.target]
    if any(not name or not url for name, url in targets):
        raise ValueError("--target takes NAME=URL, e.g. batchlab=http://127.0.0.1:8000")
    levels = [int(c) for c in args.concurrency.split(",")]
    rng = random.Random(args.seed)
    lengths = _lengths(args.prompt_len, args.requests, rng)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(n)) for n in lengths]
    outputs = _lengths(args.output_len, args.requests, rng)
    results = []
    if args.warmup < 0:
        raise ValueError("--warmup takes K >= 0 rounds")
    if args.long_prompt is not None:
        return _long_command(args, console, targets, levels, prompts, outputs)
    for name, url in targets:
        for c in levels:
            n = min(len(prompts), c) if args.warmup else 0
            for _ in range(args.warmup):
                asyncio.run(run_level(name, url, args.model, c, prompts[:n], outputs[:n]))
            results.append(asyncio.run(run_level(name, url, args.model, c, prompts, outputs)))
            console.print(f"{name} C={c}: {results[-1].tokens_per_s} tok/s", highlight=False)
    table = Table(title=f"{args.model}: {args.requests} requests a level")
    for column in ("target", "C", "tok/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
                   "ITL p99 ms", "errors"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(r.target, str(r.concurrency), f"{r.tokens_per_s:g}", f"{r.ttft_p50_ms:g}",
                      f"{r.ttft_p99_ms:g}", f"{r.itl_p50_ms:g}", f"{r.itl_p99_ms:g}",
                      str(r.errors))
    console.print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {k: str(v) for k, v in vars(args).items() if k != "func"}
    (args.out / "load.json").write_text(json.dumps(
        {"settings": settings, "results": [asdict(r) for r in results]}, indent=1) + "\n")
    _plot(results, args.out / "load.png")
    console.print(f"wrote {args.out / 'load.json'} and {args.out / 'load.png'}")
    return 0 if all(r.errors == 0 for r in results) else 1


def _long_command(args, console, targets, levels, prompts, outputs) -> int:
    from batchlab.serve.load_long import markdown, run_long_level

    if args.long_prompt < 1:
        raise ValueError("--long-prompt takes N >= 1 token ids")
    results = []
    for name, url in targets:
        for c in levels:
            n = min(len(prompts), c) if args.warmup else 0
            for _ in range(args.warmup):
                asyncio.run(run_level(name, url, args.model, c, prompts[:n], outputs[:n]))
            results.append(asyncio.run(run_long_level(
                name, url, args.model, c, prompts, outputs, args.long_prompt,
                salt=len(results))))
    table = markdown(results)  # a markdown table: it goes into docs as it is
    console.print(table, highlight=False, markup=False)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "long.md").write_text(table)
    settings = {k: str(v) for k, v in vars(args).items() if k != "func"}
    (args.out / "long.json").write_text(json.dumps(
        {"settings": settings, "results": [asdict(r) for r in results]}, indent=1) + "\n")
    console.print(f"wrote {args.out / 'long.json'} and {args.out / 'long.md'}")
    return 0 if all(r.short_errors == 0 for r in results) else 1


def _plot(results: list[LevelResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (tps, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    for name in dict.fromkeys(r.target for r in results):
        mine = [r for r in results if r.target == name]
        cs = [r.concurrency for r in mine]
        tps.plot(cs, [r.tokens_per_s for r in mine], marker="o", label=name)
        ttft.plot(cs, [r.ttft_p50_ms for r in mine], marker="o", label=name)
    for ax, label in ((tps, "output tok/s"), (ttft, "TTFT p50 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

