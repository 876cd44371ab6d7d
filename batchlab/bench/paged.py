"""The paged path's two workload tables (issue 27), printed as Markdown.

    density   rows that fit a fixed KV budget, prompt lengths drawn from 1..512: l1's
              padded batch (every row as wide as the longest, in BatchKV's 256-column
              steps; also without the steps) against the block manager's own
              allocation (whole blocks per row, no padding), row by row until full
    prefix    rows sharing a system prompt, arriving one a step, run through the
              engine on a zoo model: prefix hit rate, prefill ids saved, blocks held,
              time to first token, against the same rows with sharing off (and l1);
              the tokens of every row must be equal in all three runs

    gather    one layer's decode step, ``update_and_fetch`` and eval: l1's BatchKV
              slice against PagedKV's gather, at a few (B, width)

    python -m batchlab.bench.paged density [--budget 16384] [--gen 128] [--trials 20]
    python -m batchlab.bench.paged prefix [--model llama] [--rows 16] [--system 256]
    python -m batchlab.bench.paged gather
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import mlx.core as mx

from batchlab.engine.caches.kv import STEP
from batchlab.engine.core.batch import Request
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.paged.block_manager import BlockManager, OutOfBlocks
from batchlab.engine.paths.paged.path import PagedScheduler
from batchlab.engine.paths.paged.table import BlockTable


def l1_rows(lengths: list[int], budget: int, step: int = STEP) -> int:
    """Rows of a left-padded batch that fit ``budget`` token columns, in arrival order."""
    n, widest = 0, 0
    for length in lengths:
        widest = max(widest, length)
        width = -(-widest // step) * step
        if (n + 1) * width > budget:
            break
        n += 1
    return n


def paged_rows(lengths: list[int], budget: int, block_size: int) -> int:
    """Rows the block manager admits into ``budget // block_size`` blocks, in order."""
    manager = BlockManager(block_size, num_blocks=budget // block_size)
    for n, length in enumerate(lengths):
        table = BlockTable()
        try:
            manager.append(table, [None] * length)
        except OutOfBlocks:
            return n
    return len(lengths)


def density_markdown(budget: int, gen: int, trials: int, block_size: int, seed: int) -> str:
    ratios, ratios_payload, rows = [], [], []
    for t in range(trials):
        rng = random.Random(seed + t)
        lengths = [rng.randint(1, 512) + gen for _ in range(4 * budget // 16)]
        padded, payload = l1_rows(lengths, budget), l1_rows(lengths, budget, step=1)
        paged = paged_rows(lengths, budget, block_size)
        rows.append((padded, payload, paged))
        ratios.append(paged / padded)
        ratios_payload.append(paged / payload)
    mean = statistics.mean
    lines = [f"KV budget {budget} token slots per layer; prompts 1..512 ids (uniform) + {gen} "
             f"generated; block size {block_size}; {trials} seeded trials (seed {seed}+t).", "",
             "| | l1 (256-col steps) | l1 (payload only) | paged | paged / l1 | "
             "paged / l1 payload |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines.append(f"| mean rows | {mean(r[0] for r in rows):.1f} | {mean(r[1] for r in rows):.1f}"
                 f" | {mean(r[2] for r in rows):.1f} | {mean(ratios):.2f}x | "
                 f"{mean(ratios_payload):.2f}x |")
    lines.append(f"| worst trial | {min(r[0] for r in rows)} | {min(r[1] for r in rows)} | "
                 f"{min(r[2] for r in rows)} | {min(ratios):.2f}x | {min(ratios_payload):.2f}x |")
    return "\n".join(lines)


def _run(scheduler: Scheduler, prompts: list[tuple[int, ...]], gen: int) -> dict:
    """Insert one prompt per step; per row its tokens and time to first token."""
    inserted, first, tokens = {}, {}, {f"r{i}": [] for i in range(len(prompts))}
    peak = 0
    step = 0
    while step < len(prompts) or scheduler.num_active:
        if step < len(prompts):
            name = f"r{step}"
            scheduler.insert([Request(name=name, prompt=prompts[step], max_tokens=gen)])
            inserted[name] = time.perf_counter()
        for e in scheduler.step():
            tokens[e.name].append(e.token)
            first.setdefault(e.name, time.perf_counter() - inserted[e.name])
        stats = getattr(scheduler.caches, "stats", lambda: None)()
        peak = max(peak, stats.num_used if stats else 0)
        step += 1
    return {"tokens": tokens, "ttft": [first[n] for n in sorted(first)], "peak": peak,
            "scheduler": scheduler}


def prefix_markdown(model_name: str, rows: int, system: int, gen: int, seed: int) -> str:
    from batchlab.zoo.load import load

    model = load(model_name).model
    rng = random.Random(seed)
    shared = [rng.randrange(3, 250) for _ in range(system)]
    prompts = [tuple(shared + [rng.randrange(3, 250) for _ in range(rng.randint(8, 40))])
               for _ in range(rows)]

    class NoSharing(PagedScheduler):
        share_prefixes = False

    runs = {}
    for label, cls in (("paged, sharing", PagedScheduler), ("paged, no sharing", NoSharing),
                       ("l1", Scheduler)):
        _run(cls(model), prompts[:2], 2)  # warm-up
        runs[label] = _run(cls(model), prompts, gen)
        mx.clear_cache()
    same = all(r["tokens"] == runs["l1"]["tokens"] for r in runs.values())
    total = sum(len(p) - 1 for p in prompts)
    lines = [f"{model_name}: {rows} rows, a {system}-id system prompt + 8..40 own ids each, "
             f"one row inserted per step, {gen} tokens each; greedy; block size 16. Tokens "
             f"equal in all three runs: {same}.", "",
             "| run | prefix hit rate | prefill ids saved | blocks held (peak, per layer) | "
             "TTFT median ms | TTFT mean ms |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, r in runs.items():
        s = r["scheduler"]
        stats = s.caches.stats() if isinstance(s, PagedScheduler) else None
        hit = f"{stats.hit_rate:.2f} ({stats.num_hits}/{stats.num_queries})" if stats else "-"
        saved = (f"{s.num_prefill_saved} / {total}" if isinstance(s, PagedScheduler) else "-")
        peak = str(r["peak"]) if stats else "-"
        lines.append(f"| {label} | {hit} | {saved} | {peak} | "
                     f"{1e3 * statistics.median(r['ttft']):.1f} | "
                     f"{1e3 * statistics.mean(r['ttft']):.1f} |")
    return "\n".join(lines)


def gather_markdown(heads: int = 4, dim: int = 64, repeats: int = 40) -> str:
    from batchlab.engine.caches.kv import BatchKV
    from batchlab.engine.paths.paged.cache import PagedKV
    from batchlab.engine.paths.paged.pool import LayerPool

    lines = [f"One layer's decode step (update_and_fetch of one token per row, then eval), "
             f"{heads} KV heads of {dim}, bf16; median of {repeats} after a warm-up, µs.", "",
             "| B | width | l1 (BatchKV) | paged (gather) | paged / l1 |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for B, width in ((1, 128), (8, 128), (8, 512), (32, 512)):
        got = {}
        for name in ("l1", "paged"):
            cache = (BatchKV([0] * B) if name == "l1"
                     else PagedKV([0] * B, LayerPool(BlockManager(16))))
            k = mx.random.normal((B, heads, width, dim)).astype(mx.bfloat16)
            mx.eval(cache.update_and_fetch(k, k))
            one = mx.random.normal((B, heads, 1, dim)).astype(mx.bfloat16)
            times = []
            for _ in range(repeats + 5):
                start = time.perf_counter()
                mx.eval(*cache.update_and_fetch(one, one))
                times.append(time.perf_counter() - start)
            got[name] = 1e6 * statistics.median(times[5:])
        lines.append(f"| {B} | {width} | {got['l1']:.0f} | {got['paged']:.0f} | "
                     f"{got['paged'] / got['l1']:.1f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m batchlab.bench.paged")
    p.add_argument("table", choices=["density", "prefix", "gather"])
    p.add_argument("--budget", type=int, default=16384, help="KV token slots per layer")
    p.add_argument("--gen", type=int, default=None, help="generated tokens per row")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--model", default="llama")
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--system", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.table == "gather":
        print(gather_markdown())
    elif a.table == "density":
        print(density_markdown(a.budget, 128 if a.gen is None else a.gen, a.trials,
                               a.block_size, a.seed))
    else:
        print(prefix_markdown(a.model, a.rows, a.system, 8 if a.gen is None else a.gen, a.seed))


if __name__ == "__main__":
    main()
