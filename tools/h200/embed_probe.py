"""Issue 28, item 3: the embedding lookup of a B=256 decode step, timed alone.

Nsight put the first kernel of llama-3.1-8b B=256's fast step, the embedding lookup
(``mlx::gather``, 256 rows of 4096 bf16 from a 128256-row table), at 145-398 us, and at
5.5 us for one row (reports/bench/cuda-sm90/issue28-split/s33-profile/). Here each way
of looking the rows up is timed by itself: ``nn.Embedding`` as the model calls it
(tokens ``(B, 1)``), ``mx.take`` along axis 0 with flat tokens, and the same with sorted
tokens (rows read in order). Each is a median of 7 rounds of 50 lookups of fresh
tokens, so no round reuses a cached row. The greedy argmax over ``(B, vocab)`` logits is
timed as well, since it moved between 33 and 233 us in the same profiles.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/embed_probe.py [--batch 256]
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
from mlx import nn


def timed(make, n=50, rounds=7) -> float:
    """us a call: ``make(i)`` builds call i's output lazily; n calls evaluated per round."""
    mx.eval([make(i) for i in range(4)])
    mx.synchronize()
    per = []
    for r in range(rounds):
        outs = [make(r * n + i) for i in range(n)]
        start = time.perf_counter()
        mx.eval(outs)
        mx.synchronize()
        per.append((time.perf_counter() - start) / n)
    return statistics.median(per) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--dim", type=int, default=4096)
    args = ap.parse_args()
    embed = nn.Embedding(args.vocab, args.dim)
    embed.weight = embed.weight.astype(mx.bfloat16)
    mx.eval(embed.parameters())
    tokens = [mx.random.randint(0, args.vocab, (args.batch,)).astype(mx.uint32)
              for _ in range(400)]
    mx.eval(tokens)
    ordered = [mx.sort(t) for t in tokens]
    mx.eval(ordered)
    logits = mx.random.normal((args.batch, args.vocab)).astype(mx.bfloat16)
    mx.eval(logits)
    mb = args.batch * args.dim * 2 / 1e6
    print(f"B={args.batch} vocab={args.vocab} dim={args.dim}: {mb:.1f} MB of rows a lookup")
    rows = {
        "nn.Embedding, tokens (B, 1)": lambda i: embed(tokens[i][:, None]),
        "mx.take axis 0, tokens (B,)": lambda i: mx.take(embed.weight, tokens[i], axis=0),
        "mx.take axis 0, sorted tokens": lambda i: mx.take(embed.weight, ordered[i], axis=0),
        "argmax over (B, vocab) logits": lambda i: mx.argmax(logits + i, axis=-1),
        "logits + i alone (argmax's input)": lambda i: logits + i,
    }
    for name, make in rows.items():
        print(f"{name:36s} {timed(make):9.1f} us", flush=True)


if __name__ == "__main__":
    main()
