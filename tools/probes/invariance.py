"""What makes a batched row's bits differ from the same row alone, on this backend.

    PYTHONPATH=. python tools/probes/invariance.py [MODEL ...]   # default: the zoo families

Three probes, each printing one line per case (``same`` or how many bits differ):

1. matmul: every distinct Linear / QuantizedLinear / tied-embedding shape of the model,
   row 0 of an M-row product against the same row alone (M = 1) and against M = 2;
2. attention: ``mx.fast.scaled_dot_product_attention`` of one query over a row's keys
   against the same keys with masked keys (random contents) prepended or appended;
3. end to end: each row of a needle cell (B=8 mixed lengths, joins and an evict, two
   seeds) on a path against that row run alone on the same path (the solo gate,
   ``batchlab.matrix.solo``), for l1 (the negative control), invariant, and invariant
   with its row-blocked GEMMs off (the same as invariant on the CPU, where it never
   blocks; on a GPU it shows what the blocking buys).

The findings are the table in docs/invariant.md.
"""

from __future__ import annotations

import sys

import mlx.core as mx
from mlx import nn

from batchlab.cells.spec import expand
from batchlab.engine.paths.invariant.path import InvariantScheduler
from batchlab.judging.compare import first_divergence
from batchlab.matrix.engine_run import run_cell
from batchlab.matrix.solo import forget_solo_runs, solo_reference
from batchlab.selftest.inject import Patch, applied
from batchlab.zoo import load

FAMILIES = ["llama", "qwen3", "gemma3", "gemma4-e4b", "gpt-oss", "qwen3.5", "mamba2", "lfm2",
            "qwen3-moe", "smollm2-135m"]
M_VALUES = (1, 2, 3, 4, 7, 8, 16, 32, 64)


def bits_equal(a: mx.array, b: mx.array) -> bool:
    return bool(mx.array_equal(a, b).item())


def linear_shapes(model: nn.Module):
    """(name, module, in_dims, dtype) per distinct matmul kind and shape."""
    seen = {}
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.QuantizedLinear)):
            w = m.weight
            k = w.shape[1] * (32 // m.bits) if isinstance(m, nn.QuantizedLinear) else w.shape[1]
            key = (type(m).__name__, tuple(w.shape))
            seen.setdefault(key, (name, m, k))
    return list(seen.values())


def probe_matmul(model: nn.Module, dtype) -> list[str]:
    out = []
    for name, layer, k in linear_shapes(model):
        x = mx.random.normal((max(M_VALUES), k), key=mx.random.key(1)).astype(dtype)
        alone = layer(x[:1])
        bad = [m for m in M_VALUES if not bits_equal(layer(x[:m])[:1], alone)]
        # the last row of M rows against itself alone: position inside the product
        pos = [m for m in M_VALUES[1:] if not bits_equal(layer(x[:m])[m - 1:], layer(x[m - 1:m]))]
        verdict = "same at every M" if not bad and not pos else f"differs at M={bad} pos={pos}"
        out.append(f"  matmul {type(layer).__name__} {name} K={k}: {verdict}")
    return out


def probe_attention(dtype) -> list[str]:
    out = []
    H, D = 4, 16
    for n in (1, 7, 33):
        q = mx.random.normal((1, H, 1, D), key=mx.random.key(2)).astype(dtype)
        k = mx.random.normal((1, H, n, D), key=mx.random.key(3)).astype(dtype)
        v = mx.random.normal((1, H, n, D), key=mx.random.key(4)).astype(dtype)
        ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5, mask=None)
        for pad in (1, 5, 64):
            junk = mx.random.normal((1, H, pad, D), key=mx.random.key(5)).astype(dtype)
            for side in ("prepended", "appended"):
                kk = mx.concatenate([junk, k] if side == "prepended" else [k, junk], axis=2)
                vv = mx.concatenate([junk, v] if side == "prepended" else [v, junk], axis=2)
                keep = mx.arange(n + pad) >= pad if side == "prepended" else mx.arange(n + pad) < n
                got = mx.fast.scaled_dot_product_attention(q, kk, vv, scale=D ** -0.5,
                                                           mask=keep[None, None, None, :])
                if not bits_equal(got, ref):
                    out.append(f"  sdpa n={n} {pad} masked keys {side}: DIFFERS "
                               f"(max {mx.abs(got - ref).max().item():.3g})")
    return out or ["  sdpa: same with masked keys prepended or appended (n 1/7/33, pad 1/5/64)"]


def needle_cells(model: str, path: str, steps: int, batch: int):
    """A needle among fillers of mixed lengths, joins and an evict, two trials."""
    return expand({"defaults": {"path": path, "steps": steps},
                   "sweep": [{"models": [model], "batch": [batch], "padding": ["needle"],
                              "scripts": ["join-evict", "staggered"], "contexts": ["short"],
                              "seed": s} for s in (0, 1)]}, where="probe")


def probe_rows(model: str, path: str, steps: int, batch: int) -> str:
    """Each cell's rows against their solo runs on ``path`` (l1 included: the solo gate
    does not care what the path promises)."""
    out = []
    for cell in needle_cells(model, path, steps, batch):
        got = run_cell(cell)
        d = first_divergence(solo_reference(cell, got), got, [r.name for r in cell.rows])
        rows = [r.name for r in cell.rows
                if first_divergence(solo_reference(cell, got), got, [r.name]) is not None]
        out.append(f"{cell.script}/seed{cell.seed}: " + (
            "every row bit-identical" if d is None else
            f"{len(rows)}/{len(cell.rows)} rows differ, first: {d.describe()}"))
    return f"  rows vs solo on {path}: " + "; ".join(out)


def main(names: list[str]) -> None:
    for name in names or FAMILIES:
        loaded = load(name)
        dtype = getattr(mx, loaded.dtype)
        print(f"{name} ({loaded.dtype})")
        for line in probe_matmul(loaded.model, dtype):
            print(line)
        real = name == "smollm2-135m"
        size = {"steps": 4 if real else 14, "batch": 4 if real else 8}
        for path in ("l1", "invariant"):
            print(probe_rows(name, path, **size))
        # the invariant path without row-blocked GEMMs: what the blocking buys (on a GPU)
        forget_solo_runs()
        with applied([Patch(owner=InvariantScheduler, name="row_block", value=0)]):
            print(probe_rows(name, "invariant", **size).replace(
                "on invariant", "on invariant, row blocking off"))
        forget_solo_runs()
    print("attention (bfloat16 / float32)")
    for dtype in (mx.bfloat16, mx.float32):
        for line in probe_attention(dtype):
            print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
