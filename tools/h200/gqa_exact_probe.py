"""Issue 28, item 3: is the grouped decode kernel MLX's fused decode attention bit for bit?

Part ``kernel``: for the kernel's layouts (``simple``: MLX's; ``staged``:
``grouped_decode_staged.py``; ``looped``: ``grouped_decode_looped.py`` at its default W),
per head shape (the bench's 1B, 8B and 0.6B heads, head
dim 96, float16, float32, G = 8), batch and key count (across 1..255: the kernel's
range), random inputs, keys and values a view of a wider buffer as BatchKV serves them,
the kernel's output against ``mx.fast.scaled_dot_product_attention``'s with
``mx.array_equal``: once with the inputs evaluated, once built in the same graph as the
attention (a slice update of a buffer, then a slice: as the cache serves them), and once
with scores spread so far apart that ``exp2`` leaves the normal range. ``EXACT OK yes``
when every one is equal. Then, for information, the same comparison past the kernel's
range (MLX may decode through cuDNN from 256 keys) and the time per call against MLX's.

Part ``looped``: the same comparisons for the ``looped`` layout alone, at W = 8 (its
default) on every shape and W = 4, 16 and W = 8 with its L2 prefetch on the 8B and G = 8
shapes (``EXACT OK``), then a timing table: looped at each W (and W = 8 with the
prefetch) against staged, simple and MLX at llama-3.1-8b's heads (B = 256 at 128, 192
and 255 keys; B = 64 at 192), median of 7 rounds of 24 calls.

Part ``ring``: the same comparisons for ``looped`` with its ``cp.async`` ring (the
default, and W = 8 / 16 at each ring size), keys and values also as strided views, then
its timing table against no ring.

Part ``stage``: the same comparisons for ``looped`` staging every row of the block in
shared memory before computing: its timing table against the default and the ring,
then its bits (W = 8, 16, 32; keys and values also as strided views).

Part ``split``: the same comparisons for ``looped`` with the heads' score sums split
over the lanes (``H``): its time against MLX's sums, then its bits (W = 8 and 16, with
the ring, staged; strided views too).

Part ``flat``: fast's decode forward on flat hidden states against the modules'
forward (``BATCHLAB_FAST_FLAT=0``), the kernel on: every token and logprob byte equal
(``FLAT SAME yes``).

Part ``onerow``: fast's one-row decode steps with each layer's q/k/v and gate/up as one
product (and llama's queries and keys through one RoPE call) against the same steps
with the modules' separate products (``BATCHLAB_FAST_ONE_ROW=0``), on the flat forward
and the modules': every token and logprob byte equal, and the fused products must have
run (``ONE ROW SAME yes``).

Part ``long``: from 256 keys (``long_part``), the default layout against MLX with
cuDNN off (``EXACT LONG yes`` up to 1023 keys), and its time against MLX's.

Part ``fast``: the ``fast`` path's scheduler on bench shapes (real widths, few layers,
random weights, greedy), equal prompts with rows finishing at different steps and a
ragged join, once with ``BATCHLAB_FAST_GQA=0`` and once with ``=1``: every emitted token
and the bytes of every logprobs vector must be equal, and the kernel must have run
(``FAST SAME yes``).

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/gqa_exact_probe.py \
        [kernel|looped|ring|stage|split|long|fast|flat|onerow|repeat|all]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import mlx.core as mx
import numpy as np

from batchlab.engine.kernels import grouped_decode as gd

# This probe checks the layouts that keep MLX's bits. The tiled kernel, fast's CUDA default
# since the sixteenth round, has its own float order and its own probe (tiled_probe.py).
gd.TILED = False
SDPA = mx.fast.scaled_dot_product_attention
BF, F16, F32 = mx.bfloat16, mx.float16, mx.float32
# (name, query heads, KV heads, head dim, dtype, batches)
HEADS = [
    ("llama-3.1-8b", 32, 8, 128, BF, (1, 5, 64)),
    ("llama-3.2-1b", 32, 8, 64, BF, (1, 5, 64)),
    ("qwen3-0.6b", 16, 8, 128, BF, (1, 5)),
    ("d96 G4", 16, 4, 96, BF, (3,)),
    ("d96 G2 f32", 8, 4, 96, F32, (3,)),
    ("f16 G2", 8, 4, 128, F16, (3,)),
    ("f32 d64 G1", 4, 4, 64, F32, (3,)),
    ("f32 d128 G4", 32, 8, 128, F32, (2,)),
    ("d64 G8", 64, 8, 64, BF, (2,)),
]
KEYS = (1, 2, 31, 32, 33, 63, 100, 129, 192, 200, 255)


def inputs(b, hq, hkv, dim, dt, keys, width, spread=1.0):
    q = (mx.random.normal((b, hq, 1, dim)) * spread).astype(dt)
    kbuf = mx.random.normal((b, hkv, width, dim)).astype(dt)
    vbuf = mx.random.normal((b, hkv, width, dim)).astype(dt)
    return q, kbuf, vbuf


LAYOUTS = ("simple", "staged", "looped")


def compare(q, k, v, scale, layout=None, warps=None, prefetch=None,
            ring=None, stage=None, split=None) -> tuple[bool, float]:
    ours = gd.grouped_decode_attention(q, k, v, scale, layout, warps, prefetch, ring, stage,
                                       split)
    mlx = SDPA(q, k, v, scale=scale, mask=None)
    same = mx.array_equal(ours, mlx)
    diff = mx.abs(ours.astype(F32) - mlx.astype(F32)).max()
    mx.eval(same, diff)
    return bool(same.item()), float(diff.item())


def in_graph(q, kbuf, vbuf, keys, scale, layout=None, warps=None, prefetch=None,
             ring=None, stage=None, split=None):
    """keys / values written into a zero buffer and sliced, in the attention's graph."""
    zk, zv = mx.zeros_like(kbuf), mx.zeros_like(vbuf)
    zk[..., :keys, :] = kbuf[..., :keys, :]
    zv[..., :keys, :] = vbuf[..., :keys, :]
    k, v = zk[..., :keys, :], zv[..., :keys, :]
    ours = gd.grouped_decode_attention(q, k, v, scale, layout, warps, prefetch, ring, stage,
                                       split)
    mlx = SDPA(q, k, v, scale=scale, mask=None)
    same = mx.array_equal(ours, mlx)
    mx.eval(same)
    return bool(same.item())


def timed(fn, n=24, rounds=7) -> float:
    mx.eval([fn() for _ in range(4)])
    mx.synchronize()
    per = []
    for _ in range(rounds):
        start = time.perf_counter()
        mx.eval([fn() for _ in range(n)])
        mx.synchronize()
        per.append((time.perf_counter() - start) / n)
    return statistics.median(per) * 1e6


# (name, query heads, KV heads, head dim, B, keys) of the timing tables
TIMED_SHAPES = (
    ("llama-3.1-8b", 32, 8, 128, 256, 128), ("llama-3.1-8b", 32, 8, 128, 256, 192),
    ("llama-3.1-8b", 32, 8, 128, 256, 255), ("llama-3.1-8b", 32, 8, 128, 64, 192),
    ("llama-3.2-1b", 32, 8, 64, 256, 192), ("llama-3.2-1b", 32, 8, 64, 64, 128),
    ("qwen3-0.6b", 16, 8, 128, 256, 192))


def timing_table(columns, shapes, width: int) -> None:
    """A row a shape: us a call of ``grouped_decode_attention`` with each column's
    keyword arguments, then MLX's, the bytes read and the best column's GB/s."""
    print(f"{'shape':14s} {'B':>4s} {'keys':>5s} "
          + " ".join(f"{label + ' us':>{width}s}" for label, _ in columns)
          + f" {'MLX us':>8s} {'MB':>7s} {'GB/s best':>9s}", flush=True)
    for name, hq, hkv, dim, b, keys in shapes:
        q, kbuf, vbuf = inputs(b, hq, hkv, dim, BF, keys, 256)
        mx.eval(q, kbuf, vbuf)
        k, v = kbuf[:, :, :keys], vbuf[:, :, :keys]
        us = [timed(lambda kw=kw: gd.grouped_decode_attention(
            q, k, v, dim ** -0.5, **kw)) for _, kw in columns]  # noqa: B023
        mlx = timed(lambda: SDPA(q, k, v, scale=dim ** -0.5, mask=None))  # noqa: B023
        mb = 2 * b * hkv * keys * dim * 2 / 1e6
        print(f"{name:14s} {b:4d} {keys:5d} " + " ".join(f"{u:{width}.1f}" for u in us)
              + f" {mlx:8.1f} {mb:7.1f} {mb / min(us) * 1e3:9.0f}", flush=True)


def exact(variants, strided=False) -> bool:
    """Every head shape, batch and key count of ``HEADS`` x ``KEYS`` (evaluated inputs,
    in-graph, far-apart scores) for each (layout, warps, prefetch[, ring]) of
    ``variants(name)``; with ``strided``, also keys and values whose dims are not
    contiguous (a transposed buffer: the kernels' gather fallbacks)."""
    mx.random.seed(0)
    ok_all, checked = True, 0
    for name, hq, hkv, dim, dt, batches in HEADS:
        scale = dim ** -0.5
        bad = []
        for b in batches:
            for keys in KEYS:
                q, kbuf, vbuf = inputs(b, hq, hkv, dim, dt, keys, 256)
                mx.eval(q, kbuf, vbuf)
                k, v = kbuf[:, :, :keys], vbuf[:, :, :keys]
                assert gd.fits(q, k, v, None, None), (name, b, keys)
                qs = (q.astype(F32) * 40).astype(dt)  # scores ~hundreds apart: exp2 underflows
                if strided:
                    kt = mx.swapaxes(mx.swapaxes(kbuf, 2, 3) + 0, 2, 3)[:, :, :keys]
                    vt = mx.swapaxes(mx.swapaxes(vbuf, 2, 3) + 0, 2, 3)[:, :, :keys]
                    mx.eval(kt, vt)
                for layout, warps, pf, *extra in variants(name):
                    r = extra[0] if extra else None
                    st = extra[1] if len(extra) > 1 else None
                    sp = extra[2] if len(extra) > 2 else None
                    same, diff = compare(q, k, v, scale, layout, warps, pf, r, st, sp)
                    graph = in_graph(q, kbuf, vbuf, keys, scale, layout, warps, pf, r, st, sp)
                    far, _ = compare(qs, k, v, scale, layout, warps, pf, r, st, sp)
                    gather = compare(q, kt, vt, scale, layout, warps, pf, r, st, sp)[0] \
                        if strided else True
                    checked += 3 + strided
                    if not (same and graph and far and gather):
                        tag = ((layout or "default") + (f"/W{warps}" if warps else "")
                               + ("+pf" if pf else "") + (f"/R{r}" if r is not None else "")
                               + ("/S" if st else "") + ("/H" if sp else ""))
                        bad.append(f"{tag} B{b}/N{keys}: eval {same} (max diff {diff:.3g}) "
                                   f"graph {graph} far {far} strided {gather}")
        ok_all &= not bad
        print(f"{name:14s} D={dim:3d} G={hq // hkv} {str(dt):14s} B {batches}: "
              f"{'all equal' if not bad else 'DIFFER ' + '; '.join(bad[:6])}", flush=True)
    print(f"{checked} comparisons", flush=True)
    return ok_all


def looped_part() -> bool:
    """``looped`` alone: exactness (W = 8 everywhere; W = 4, 16 and W = 8 with the L2
    prefetch on two shapes), then time."""
    def variants(name):
        extra = [("looped", 4, False), ("looped", 8, True)] \
            if name in ("llama-3.1-8b", "d64 G8") else []
        return [("looped", 8, False), ("looped", 16, False), (None, None, None), *extra]

    ok_all = exact(variants)
    print(f"EXACT OK {'yes' if ok_all else 'no'}", flush=True)
    cols = [("looped", 4, False), ("looped", 8, False), ("looped", 16, False),
            ("looped", 8, True), ("staged", None, None), ("simple", None, None),
            (None, None, None)]
    timing_table([(((lay or "default")[:7] + (f"/{w}" if w else "") + ("+pf" if pf else "")),
                    {"layout": lay, "warps": w, "prefetch": pf}) for lay, w, pf in cols],
                 TIMED_SHAPES, 13)
    return ok_all


def ring_part() -> bool:
    """``looped`` with its ``cp.async`` ring: exactness (the default; no ring and every
    ring size at W = 8 and 16 on the 8B, 1B and G = 8 shapes, rings at W = 8 and 16
    elsewhere; keys and values also as strided views), then time."""
    def variants(name):
        sizes = (0, 2, 4, 8) if name in ("llama-3.1-8b", "llama-3.2-1b", "d64 G8") else (0, 4)
        return [(None, None, None)] + [("looped", w, False, r) for w in (8, 16) for r in sizes]

    ok_all = exact(variants, strided=True)
    print(f"EXACT OK {'yes' if ok_all else 'no'}", flush=True)
    cols = [("looped", 8, 0), ("looped", 16, 0), ("looped", 8, 2), ("looped", 8, 4),
            ("looped", 8, 8),
            ("looped", 16, 2), ("looped", 16, 4), ("looped", 16, 8), (None, None, None)]
    timing_table([(f"W{w}/R{r}" if w else "default", {"layout": lay, "warps": w, "ring": r})
                  for lay, w, r in cols],
                 TIMED_SHAPES[:4] + (("llama-3.1-8b", 32, 8, 128, 16, 192),) + TIMED_SHAPES[4:],
                 11)
    return ok_all


def stage_part() -> bool:
    """``looped`` staging every row in shared memory first: exactness (W = 8, 16, 32 with
    staging, and the default, on every shape; keys and values also as strided views,
    which stage through registers), after its time against the default and the ring."""
    def variants(name):
        # W = 16 and 32 spill at d64 G8 (stage_warps_for); W = 32 only where the rows fit
        # (looped.can_stage: not float32 at D = 128 and G = 4, which runs unstaged)
        wide = () if name == "d64 G8" else (16,) if name == "f32 d128 G4" else (16, 32)
        return [(None, None, None)] + [("looped", w, False, 0, True) for w in (8, *wide)]

    cols = [("default", {}), ("W16/R0", {"layout": "looped", "warps": 16, "ring": 0}),
            ("W8/R4", {"layout": "looped", "warps": 8, "ring": 4})] + [
        (f"S/W{w}", {"layout": "looped", "warps": w, "stage": True}) for w in (8, 16, 32)]
    # the time first (a call cut short keeps it), then the bits
    timing_table(cols, TIMED_SHAPES[:4] + (("llama-3.1-8b", 32, 8, 128, 16, 192),)
                 + TIMED_SHAPES[4:], 11)
    ok_all = exact(variants, strided=True)
    print(f"EXACT OK {'yes' if ok_all else 'no'}", flush=True)
    return ok_all


def split_part() -> bool:
    """``looped`` with the heads' score sums split over the lanes (template ``H``): its
    time against MLX's sums (with and without the ring, and staged), then its bits (W = 8
    and 16, the ring at W = 8, staging at W = 16, and W = 4 at the 8B heads; keys and
    values also as strided views). Groups that cannot split (1, 3, 5, ...) run MLX's
    sums either way: those shapes check that the switch leaves them alone."""
    def variants(name):
        wide = ("looped", 4, False, 0, False, True) if name == "llama-3.1-8b" else None
        stage = () if name in ("d64 G8", "f32 d128 G4") else (
            ("looped", 16, False, 0, True, True),)
        return [(None, None, None), ("looped", 8, False, 0, False, True),
                ("looped", 16, False, 0, False, True), ("looped", 8, False, 4, False, True),
                *stage, *([wide] if wide else [])]

    def col(label, warps, ring=0, stage=False, split=True):
        return (label, {"layout": "looped", "warps": warps, "ring": ring, "stage": stage,
                        "split": split})
    cols = [("default", {}), col("W8", 8, split=False), col("W8/H", 8),
            col("W16", 16, split=False), col("W16/H", 16), col("W8R4", 8, 4, split=False),
            col("W8R4/H", 8, 4), col("W16R4/H", 16, 4), col("S16/H", 16, stage=True)]
    # the time first (a call cut short keeps it), then the bits
    timing_table(cols, TIMED_SHAPES[:4] + (("llama-3.1-8b", 32, 8, 128, 16, 192),)
                 + TIMED_SHAPES[4:], 9)
    ok_all = exact(variants, strided=True)
    print(f"EXACT OK {'yes' if ok_all else 'no'}", flush=True)
    return ok_all


def kernel_part() -> bool:
    ok_all = exact(lambda name: [(layout, None, None) for layout in LAYOUTS])
    # past the kernel's range, for information: equal where MLX still runs its one-pass
    # kernel (a buffer not grown in steps of 256), not where it runs cuDNN
    for keys, width in ((256, 512), (256, 300), (300, 512), (300, 600), (700, 1000),
                        (1024, 1100)):
        q, kbuf, vbuf = inputs(4, 32, 8, 128, BF, keys, width)
        mx.eval(q, kbuf, vbuf)
        ev, _ = compare(q, kbuf[:, :, :keys], vbuf[:, :, :keys], 128 ** -0.5, "simple")
        gr = in_graph(q, kbuf, vbuf, keys, 128 ** -0.5, "simple")
        print(f"info: {keys} keys of a {width}-wide buffer: evaluated inputs equal {ev}, "
              f"in-graph equal {gr}", flush=True)
    print(f"EXACT OK {'yes' if ok_all else 'no'}", flush=True)
    print(f"{'shape':14s} {'B':>4s} {'keys':>5s} {'simple us':>10s} {'staged us':>10s} "
          f"{'looped us':>10s} {'MLX us':>8s} {'MB':>7s} {'GB/s':>6s}", flush=True)
    for name, hq, hkv, dim, b, keys in (("llama-3.1-8b", 32, 8, 128, 256, 192),
                                        ("llama-3.1-8b", 32, 8, 128, 64, 192),
                                        ("llama-3.2-1b", 32, 8, 64, 256, 192),
                                        ("llama-3.1-8b", 32, 8, 128, 1, 200),
                                        ("qwen3-0.6b", 16, 8, 128, 1, 200)):
        q, kbuf, vbuf = inputs(b, hq, hkv, dim, BF, keys, 256)
        mx.eval(q, kbuf, vbuf)
        k, v = kbuf[:, :, :keys], vbuf[:, :, :keys]
        us = [timed(lambda lay=lay: gd.grouped_decode_attention(q, k, v, dim ** -0.5,  # noqa: B023
                                                               lay)) for lay in LAYOUTS]
        mlx = timed(lambda: SDPA(q, k, v, scale=dim ** -0.5, mask=None))  # noqa: B023
        mb = 2 * b * hkv * keys * dim * 2 / 1e6
        print(f"{name:14s} {b:4d} {keys:5d} {us[0]:10.1f} {us[1]:10.1f} {us[2]:10.1f} "
              f"{mlx:8.1f} {mb:7.1f} "
              f"{mb / min(us) * 1e3:6.0f}", flush=True)
    return ok_all


def run_fast(model, gqa: str, batch: int, plen: int, steps: int, vocab: int,
             flat: str = "1", one_row: str = "1"):
    from batchlab.engine.core.batch import Request
    from batchlab.engine.core.config import ScheduleConfig
    from batchlab.engine.paths.registry import PATHS

    os.environ["BATCHLAB_FAST_GQA"] = gqa
    os.environ["BATCHLAB_FAST_FLAT"] = flat
    os.environ["BATCHLAB_FAST_ONE_ROW"] = one_row
    rng = np.random.default_rng([batch, plen])
    prompts = rng.integers(0, vocab, size=(batch, plen)).tolist()
    late = rng.integers(0, vocab, size=(plen // 2 + 3,)).tolist()
    sched = PATHS["fast"].scheduler(
        model, ScheduleConfig(prefill_batch_size=batch, completion_batch_size=batch + 1))
    # equal prompts, rows ending at different steps (the batch shrinks, no padding)
    sched.insert([Request(name=f"r{i}", prompt=tuple(p), max_tokens=max(4, steps - 2 * i))
                  for i, p in enumerate(prompts)])
    out, n = [], 0
    while sched.num_active:
        for e in sched.step():
            out.append((e.name, e.token, np.array(e.logprobs.astype(F32)).tobytes()))
        n += 1
        if n == steps // 2:  # a ragged join: masked steps from here (MLX's attention)
            sched.insert([Request(name="late", prompt=tuple(late), max_tokens=8)])
    return out


def fast_part() -> bool:
    from batchlab.bench.shapes import load_model

    calls = [0]
    real = gd.grouped_decode_attention

    def counted(*a):
        calls[0] += 1
        return real(*a)

    gd.grouped_decode_attention = counted
    ok_all = True
    # (16 rows x 8 KV heads: the kernel's MIN_BLOCKS; the first two sessions ran 8, 8, 4
    # rows, before that threshold)
    for name, batch, plen, steps in (("llama-3.1-8b@L3", 16, 100, 60),
                                     ("llama-3.2-1b@L3", 16, 150, 100),
                                     ("qwen3-0.6b@L3", 16, 20, 40)):
        loaded = load_model(name)
        runs = {}
        for gqa in ("0", "1"):
            calls[0] = 0
            runs[gqa] = (run_fast(loaded.model, gqa, batch, plen, steps, loaded.vocab_size),
                         calls[0])
        (off, c_off), (on, c_on) = runs["0"], runs["1"]
        same = len(off) == len(on) and all(a == b for a, b in zip(off, on, strict=True))
        first = next((i for i, (a, b) in enumerate(zip(off, on, strict=False)) if a != b), None)
        ok = same and c_on > 0 and c_off == 0
        ok_all &= ok
        print(f"fast {name} B={batch} prompt {plen}: {len(on)} emissions, kernel calls "
              f"{c_on} (off: {c_off}); tokens and logprobs equal: {same}"
              + ("" if first is None else f" (first difference at emission {first})"),
              flush=True)
    print(f"FAST SAME {'yes' if ok_all else 'no'}", flush=True)
    return ok_all


def repeat_part() -> bool:
    """fast run twice with every setting the same: tokens and logprob bytes, as a B=256
    batch shrinks through the row counts its rows end at (the control for the fourteenth
    round's kv part, which compared two settings on these runs)."""
    from batchlab.bench.shapes import load_model

    ok_all = True
    for name, batch, plen, steps in (("llama-3.2-1b@L3", 256, 64, 300),
                                     ("llama-3.1-8b@L3", 256, 64, 300)):
        loaded = load_model(name)
        first = run_fast(loaded.model, "1", batch, plen, steps, loaded.vocab_size)
        second = run_fast(loaded.model, "1", batch, plen, steps, loaded.vocab_size)
        same = len(first) == len(second) and all(
            a == b for a, b in zip(first, second, strict=True))
        tokens = [(a[0], a[1]) for a in first] == [(b[0], b[1]) for b in second]
        ok_all &= same
        print(f"repeat {name} B={batch}: {len(first)} emissions; tokens equal: {tokens}; "
              f"tokens and logprobs equal: {same}", flush=True)
    print(f"REPEAT SAME {'yes' if ok_all else 'no'}", flush=True)
    return ok_all


def flat_part() -> bool:
    """fast with its flat decode forward (``flat_decode.py``) against the modules'
    forward (``BATCHLAB_FAST_FLAT=0``), the grouped kernel on: tokens and logprob bytes."""
    from batchlab.bench.shapes import load_model

    ok_all = True
    for name, batch, plen, steps in (("llama-3.1-8b@L3", 16, 100, 60),
                                     ("llama-3.2-1b@L3", 16, 150, 100),
                                     ("qwen3-0.6b@L3", 16, 20, 40),
                                     ("llama-3.2-1b@L3", 1, 64, 40),
                                     ("qwen3-0.6b@L3", 3, 30, 40)):
        loaded = load_model(name)
        flat = run_fast(loaded.model, "1", batch, plen, steps, loaded.vocab_size, "1")
        modules = run_fast(loaded.model, "1", batch, plen, steps, loaded.vocab_size, "0")
        same = len(flat) == len(modules) and flat == modules
        ok_all &= same
        print(f"flat {name} B={batch} prompt {plen}: {len(flat)} emissions; tokens and "
              f"logprobs equal to the modules' forward: {same}", flush=True)
    print(f"FLAT SAME {'yes' if ok_all else 'no'}", flush=True)
    return ok_all


def one_row_part() -> bool:
    """fast's one-row steps with fused products against the separate ones, on the flat
    forward and the modules': tokens and logprob bytes, and the fused products counted."""
    from batchlab.bench.shapes import load_model
    from batchlab.engine.paths.fast import fused_projections as fp

    products = [0]
    real = fp._Group.product

    def counted(self, x):
        products[0] += x is not self.last_x
        return real(self, x)

    fp._Group.product = counted
    ok_all = True
    # one row from the start (a join makes two for a while), and 3 / 16 rows that drain
    # to one (rows end at different steps)
    for name, batch, plen, steps in (("llama-3.1-8b@L3", 1, 100, 40),
                                     ("llama-3.2-1b@L3", 1, 64, 40),
                                     ("qwen3-0.6b@L3", 1, 30, 40),
                                     ("llama-3.2-1b@L3", 3, 150, 30),
                                     ("qwen3-0.6b@L3", 3, 20, 30),
                                     ("llama-3.1-8b@L3", 16, 60, 40)):
        loaded = load_model(name)
        for flat in ("1", "0"):
            products[0] = 0
            fused = run_fast(loaded.model, "1", batch, plen, steps, loaded.vocab_size,
                             flat, "1")
            made = products[0]
            plain = run_fast(loaded.model, "1", batch, plen, steps, loaded.vocab_size,
                             flat, "0")
            same = len(fused) == len(plain) and fused == plain
            ok = same and made > 0 and products[0] == made
            ok_all &= ok
            print(f"one row {name} B={batch} prompt {plen} flat {flat}: {len(fused)} "
                  f"emissions, {made} fused products (off: {products[0] - made}); tokens "
                  f"and logprobs equal: {same}", flush=True)
    print(f"ONE ROW SAME {'yes' if ok_all else 'no'}", flush=True)
    return ok_all


LONG_KEYS = (256, 257, 300, 511, 512, 700, 1023)  # MLX's one-pass range past 255
PAST_KEYS = (1024, 1100, 2047)  # MLX's two-pass kernel: for information
LONG_TIMED = (("llama-3.1-8b", 32, 8, 128, 256, 300), ("llama-3.1-8b", 32, 8, 128, 256, 700),
              ("llama-3.1-8b", 32, 8, 128, 64, 1023), ("llama-3.2-1b", 32, 8, 64, 256, 300),
              ("llama-3.1-8b", 32, 8, 128, 1, 300), ("llama-3.1-8b", 32, 8, 128, 1, 2047),
              ("qwen3-0.6b", 16, 8, 128, 16, 511),
              # few blocks at long contexts (added after s41): the one-pass kernel walks
              # every key in one block a KV head, MLX splits them over two passes
              ("llama-3.1-8b", 32, 8, 128, 1, 8000), ("llama-3.1-8b", 32, 8, 128, 1, 32000),
              ("llama-3.2-1b", 32, 8, 64, 4, 16000))


def long_part() -> bool:
    """From 256 keys, where fast now takes every unmasked decode call (MLX's own choice
    there, cuDNN, does not repeat itself: cudnn_decode_probe.py): the default layout
    against ``mx.fast.scaled_dot_product_attention`` with keys and values a slice of a
    buffer grown in steps of 256, evaluated and in-graph. Run with
    ``MLX_CUDA_USE_CUDNN_SDPA=0`` (MLX reads it once), MLX's choice is its vector kernel:
    equal bit for bit up to 1023 keys (``EXACT LONG yes``); from 1024 keys (its two-pass
    kernel) for information. Then us a call, the kernel against MLX's (cuDNN where it is
    on)."""
    cudnn_off = os.environ.get("MLX_CUDA_USE_CUDNN_SDPA") == "0"
    print(f"MLX_CUDA_USE_CUDNN_SDPA={os.environ.get('MLX_CUDA_USE_CUDNN_SDPA', '(unset)')}",
          flush=True)
    mx.random.seed(1)
    ok_all, checked = True, 0
    for name, hq, hkv, dim, dt, batches in HEADS[:4] + HEADS[-1:]:
        scale = dim ** -0.5
        bad, past = [], []
        for b in batches:
            for keys in LONG_KEYS + PAST_KEYS:
                width = (keys + 255) // 256 * 256
                q, kbuf, vbuf = inputs(b, hq, hkv, dim, dt, keys, width)
                mx.eval(q, kbuf, vbuf)
                k, v = kbuf[:, :, :keys], vbuf[:, :, :keys]
                mx.eval(k, v)
                assert gd.fits(q, k, v, None, None), (name, b, keys)
                same, diff = compare(q, k, v, scale)
                graph = in_graph(q, kbuf, vbuf, keys, scale)
                if keys in PAST_KEYS:
                    past.append(f"B{b}/N{keys} {'=' if same and graph else f'{diff:.2g}'}")
                    continue
                checked += 2
                if not (same and graph):
                    bad.append(f"B{b}/N{keys}: eval {same} (max diff {diff:.3g}) graph {graph}")
        ok_all &= not bad
        print(f"{name:14s} D={dim:3d} G={hq // hkv} B {batches}: "
              f"{'all equal' if not bad else 'DIFFER ' + '; '.join(bad[:6])}; past 1023: "
              + ", ".join(past), flush=True)
    print(f"{checked} comparisons (256..1023 keys)", flush=True)
    print(f"{'shape':14s} {'B':>4s} {'keys':>5s} {'ours us':>8s} {'MLX us':>8s}", flush=True)
    for name, hq, hkv, dim, b, keys in LONG_TIMED:
        width = (keys + 255) // 256 * 256
        q, kbuf, vbuf = inputs(b, hq, hkv, dim, BF, keys, width)
        k, v = kbuf[:, :, :keys], vbuf[:, :, :keys]
        mx.eval(q, k, v)
        ours = timed(lambda: gd.grouped_decode_attention(q, k, v, dim ** -0.5))  # noqa: B023
        mlx = timed(lambda: SDPA(q, k, v, scale=dim ** -0.5, mask=None))  # noqa: B023
        print(f"{name:14s} {b:4d} {keys:5d} {ours:8.1f} {mlx:8.1f}", flush=True)
    if cudnn_off:
        print(f"EXACT LONG {'yes' if ok_all else 'no'}", flush=True)
    return ok_all or not cudnn_off


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    ok = True
    if what == "looped":
        ok &= looped_part()
    if what == "ring":
        ok &= ring_part()
    if what == "stage":
        ok &= stage_part()
    if what == "split":
        ok &= split_part()
    if what == "flat":
        ok &= flat_part()
    if what == "repeat":
        ok &= repeat_part()
    if what == "long":
        ok &= long_part()
    if what == "onerow":
        ok &= one_row_part()
    if what in ("kernel", "all"):
        ok &= kernel_part()
    if what in ("fast", "all"):
        ok &= fast_part()
    sys.exit(0 if ok else 1)
