"""The invariant path's pieces: WindowKV's layout, row-blocked GEMMs, the needle, the solo gate."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import mlx.core as mx
import pytest
from mlx import nn

from batchlab.cells.scenarios import needle_prompts, row_names, seeded_prompt
from batchlab.cells.spec import expand
from batchlab.defaults import DEFAULT_GOLDENS
from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.caches.window import WindowKV
from batchlab.engine.core.factory import BatchCaches
from batchlab.engine.core.sampler import SamplingParams
from batchlab.engine.paths.invariant.path import InvariantScheduler
from batchlab.engine.paths.invariant.rowblock import (
    BlockedEmbedding,
    BlockedLinear,
    blocked_model,
    blocked_rows,
)
from batchlab.engine.paths.registry import PATHS
from batchlab.matrix.engine_run import run_cell
from batchlab.matrix.evaluate import Reference, evaluate_cell
from batchlab.matrix.solo import forget_solo_runs, solo_cell
from batchlab.selftest.inject import Patch, applied
from batchlab.status import Status
from batchlab.zoo import load

REF = Reference(matrix="test", goldens=DEFAULT_GOLDENS)


def window_left_padding(cache: WindowKV):
    """Each row's padding inside the view (<= 0: none)."""
    return cache.left_padding_host - cache.view_start()


def columns(first: int, n: int, rows: int = 2) -> mx.array:
    """Keys whose value is their column label, (rows, 1, n, 1)."""
    return mx.broadcast_to(mx.arange(first, first + n, dtype=mx.float32)[None, None, :, None],
                           (rows, 1, n, 1))


def labels(keys: mx.array) -> list[list[float]]:
    return keys[:, 0, :, 0].tolist()


def test_window_kv_reads_only_the_window_with_padding_in_front():
    cache = WindowKV(4, [0, 4])  # row B: 4 columns of padding, then 2 keys
    cache.update_and_fetch(columns(0, 6), columns(0, 6))
    assert cache._idx == 6 and cache.offset_host.tolist() == [6, 2]
    mask = cache.make_mask(1, return_array=True)
    assert mask.shape == (2, 1, 1, 4)
    assert mask[:, 0, 0].tolist() == [[True, True, True, True], [False, True, True, True]]
    keys, _ = cache.update_and_fetch(columns(100, 1), columns(100, 1))
    assert labels(keys) == [[3.0, 4.0, 5.0, 100.0]] * 2
    assert window_left_padding(cache).tolist() == [-4, 0]
    prefill = cache.make_mask(2)  # 3 older keys and 2 new, window 4, causal
    assert prefill.shape == (2, 1, 2, 5)
    assert prefill.astype(mx.int32)[0, 0].tolist() == [[1, 1, 1, 1, 0], [0, 1, 1, 1, 1]]


def test_window_kv_cuts_unread_columns_when_it_grows():
    cache = WindowKV(4, [0, 30])
    cache.update_and_fetch(columns(0, 32), columns(0, 32))
    assert cache.keys.shape[2] == 32 and cache._idx == 32
    keys, _ = cache.update_and_fetch(columns(100, 1), columns(100, 1))
    # 29 columns no window reads are cut, padding lowered with them, then 32 more columns
    assert cache.keys.shape[2] == 35 and cache._idx == 4
    assert cache.left_padding_host.tolist() == [-29, 1]
    assert cache.offset_host.tolist() == [33, 3]
    assert labels(keys) == [[29.0, 30.0, 31.0, 100.0]] * 2
    assert cache.make_mask(1, return_array=True)[:, 0, 0].tolist() == [[True] * 4] * 2
    row = cache.extract(1)
    assert row.keys[0, 0, :, 0].tolist() == [30.0, 31.0, 100.0] and row.offset == 3


def test_window_kv_drops_an_all_true_decode_mask_on_the_cpu_only():
    cache = WindowKV(4, [0, 0])
    cache.update_and_fetch(columns(0, 5), columns(0, 5))
    assert cache.make_mask(1) is None
    assert cache.make_mask(1, return_array=True).shape == (2, 1, 1, 4)


def test_blocked_rows_pad_split_and_cut_give_the_plain_product_on_the_cpu():
    layer = nn.Linear(8, 5)
    x = mx.random.normal((2, 7, 8), key=mx.random.key(3))
    calls = []

    def spy(block):
        calls.append(block.shape)
        return layer(block)

    got = blocked_rows(spy, x, 4)
    assert calls == [(4, 8)] * 4  # 14 rows padded to 16, four GEMMs of exactly 4 rows
    assert got.shape == (2, 7, 5)
    assert mx.array_equal(got, layer(x)).item()


def test_blocked_model_wraps_every_projection_and_leaves_the_model_alone():
    model = load("gemma3").model  # tied embeddings: the head is embed_tokens.as_linear
    clone = blocked_model(model, 4)
    wrapped = [n for n, m in clone.named_modules() if isinstance(m, BlockedLinear)]
    plain = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    assert len(wrapped) == len(plain) == 28
    assert isinstance(clone.model.embed_tokens, BlockedEmbedding)
    assert not any(isinstance(m, (BlockedLinear, BlockedEmbedding))
                   for _, m in model.named_modules())
    assert clone.model.layers[0].self_attn.q_proj.inner.weight is \
        model.model.layers[0].self_attn.q_proj.weight  # no copy of the weights
    quantized = nn.QuantizedLinear.from_linear(nn.Linear(64, 32), group_size=32, bits=4)
    x = mx.random.normal((3, 64), key=mx.random.key(1))
    assert mx.array_equal(BlockedLinear(quantized, 2)(x), quantized(x)).item()


NEEDLE = seeded_prompt("needle", 5, 0)


def test_the_needle_is_one_fixed_prompt_at_a_seeded_place_among_mixed_fillers():
    places = []
    for seed, lengths in ((0, [7, 5, 3, 7, 2, 4]), (1, [5, 2, 1, 1, 7, 5])):
        prompts = needle_prompts(row_names(6), 5, seed)
        assert [len(p) for p in prompts] == lengths
        places.append([i for i, p in enumerate(prompts) if p == NEEDLE])
    assert places == [[1], [5]]
    assert NEEDLE == (75, 75, 1, 247, 56)


def cell(model: str, path: str = "invariant", batch: int = 6, script: str = "join-evict",
         **extra):
    return expand({"defaults": {"path": path, "steps": 10},
                   "sweep": [{"models": [model], "batch": [batch], "padding": ["needle"],
                              "scripts": [script], "contexts": ["short"], **extra}]})[0]


def test_solo_cell_is_the_row_alone_on_the_same_path():
    c = cell("gpt-oss")
    alone = solo_cell(c, c.rows[2])
    assert alone.id == "invariant/gpt-oss/B1/solo/solo-C/ctx-short/steps10"
    assert [str(e) for e in alone.events] == ["insert C at 0"]
    assert alone.rows == (c.rows[2],)


def test_the_solo_gate_passes_the_invariant_path_and_fails_a_shared_ring():
    c = cell("gpt-oss")  # float32: the shared ring's order shows in the bits
    live = dataclasses.replace(REF, live=True)  # an ad hoc cell: its second judge runs live
    assert evaluate_cell(c, live).status == Status.PASS
    forget_solo_runs()
    try:
        with applied([Patch(owner=InvariantScheduler, name="caches",
                                value=BatchCaches(ring_class=BatchRing))]):
            result = evaluate_cell(c, REF)
    finally:
        forget_solo_runs()
    assert result.status == Status.FAIL
    assert result.detail.startswith("not batch-invariant: row B token #2 (step 4): bits")


def test_the_solo_gate_refuses_a_shared_sampler_at_temperature():
    c = replace(cell("llama"), sampling=SamplingParams(temperature=0.7, seed=1))
    result = evaluate_cell(c, REF)
    assert result.status == Status.UNSUPPORTED
    assert "global key" in result.detail


def test_the_invariant_path_is_l1_on_full_attention_models_on_the_cpu():
    # no ring, and the CPU matmul is row-invariant: nothing to change, so the same bits
    c = cell("llama", batch=8, script="staggered")
    l1, inv = run_cell(replace(c, path="l1")), run_cell(c)
    assert {n: [s.digest for s in r] for n, r in l1.rows.items()} == \
        {n: [s.digest for s in r] for n, r in inv.rows.items()}


@pytest.mark.parametrize("model", ["gemma3", "qwen3.5"])
def test_row_blocked_gemms_keep_the_bits_on_the_cpu(model):
    """The GPU's row blocking on the CPU (whose GEMM is row-invariant) changes no bit of a
    batched forward: the clone computes what the model computes."""
    from batchlab.engine.core.layers import make_batch_caches

    loaded = load(model)
    tokens = mx.array([[3, 5, 7, 11, 13], [17, 19, 23, 29, 31], [2, 4, 6, 8, 10]])
    blocked = blocked_model(loaded.model, 4)
    plain = loaded.model(tokens, cache=make_batch_caches(loaded.model, 3))
    again = blocked(tokens, cache=make_batch_caches(loaded.model, 3))
    as_bytes = lambda a: bytes(memoryview(a.astype(mx.float32)))  # noqa: E731
    assert as_bytes(plain) == as_bytes(again)


def test_the_stand_ins_compute_what_the_modules_compute():
    """invariant_modules.py: the tap-summed depthwise conv, the unsorted experts and the
    row attention reference give the originals' values (their order differs)."""
    from mlx_lm.models.switch_layers import SwitchGLU

    from batchlab.engine.kernels.row_attention import row_attention
    from batchlab.engine.paths.invariant.modules import TapConv1d, invariant_module

    mx.random.seed(0)
    conv = nn.Conv1d(12, 12, 4, groups=12, bias=True)
    x = mx.random.normal((3, 7, 12))
    assert mx.allclose(TapConv1d(conv)(x), conv(x), atol=1e-5)
    assert invariant_module(nn.Conv1d(12, 12, 4)) is None  # not depthwise: kept
    with pytest.raises(NotImplementedError, match="padding=1"):  # no mlx-lm model has one
        invariant_module(nn.Conv1d(12, 12, 4, padding=1, groups=12))
    moe = SwitchGLU(16, 24, 8)
    tokens = mx.random.normal((70, 16))  # 70 x 2 indices >= 64: mlx-lm sorts them
    idx = mx.random.randint(0, 8, (70, 2)).astype(mx.uint32)
    assert mx.allclose(invariant_module(moe)(tokens, idx), moe(tokens, idx), atol=1e-5)
    q, k, v = (mx.random.normal((2, 4, 1, 16)), mx.random.normal((2, 2, 9, 16)),
               mx.random.normal((2, 2, 9, 16)))
    mask = mx.array([[True] * 9, [False] * 3 + [True] * 6]).reshape(2, 1, 1, 9)
    fused = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=mask)
    assert mx.allclose(row_attention(q, k, v, mx.array([0, 3]), 0.25), fused, atol=1e-6)


def test_the_invariant_path_refuses_history():
    from batchlab.engine.core.batch import Request
    from batchlab.engine.core.history import History

    scheduler = PATHS["invariant"].scheduler(load("llama").model)
    with pytest.raises(ValueError, match="does not take history yet"):
        scheduler.insert([Request(name="A", prompt=(1, 2), max_tokens=2,
                                  history=History(caches=[], tokens=()))])


def test_window_kv_masks_a_decode_step_when_the_model_window_is_narrower():
    cache = WindowKV(4, [0])
    cache.update_and_fetch(columns(0, 5, rows=1), columns(0, 5, rows=1))
    mask = cache.make_mask(1, window_size=2)  # the view holds 4 keys, the window 2
    assert mask[0, 0, 0].tolist() == [False, False, True, True]


def test_the_dispatch_sends_kv_shared_layers_to_the_caching_layers_rows(monkeypatch):
    """attention_dispatch.py: a decode call on a cache that attends by rows goes to the row
    attention; so does a KV-shared layer's call (no cache) on the keys that cache was just
    served; any other call goes to mlx-lm's helper unchanged."""
    from batchlab.engine.kernels import attention_dispatch

    calls = []
    monkeypatch.setattr(attention_dispatch, "row_attention",
                        lambda q, k, v, first, scale, sinks, scores=None:
                        calls.append(("rows", first)) or q)

    def original(q, k, v, cache, scale, mask, sinks=None):
        calls.append(("mlx-lm", mask))
        return q

    class Cache:
        attends_rows = True

        def first_keys(self):
            return "first"

    dispatch = attention_dispatch.make_dispatch(original)
    q, k, v = mx.zeros((2, 4, 1, 8)), mx.zeros((2, 2, 5, 8)), mx.zeros((2, 2, 5, 8))
    dispatch(q, k, v, cache=Cache(), scale=1.0, mask="m")
    dispatch(q, k, v, cache=None, scale=1.0, mask="m")  # KV-shared: the served keys
    dispatch(q, mx.zeros((2, 2, 5, 8)), v, cache=None, scale=1.0, mask="m")  # other keys
    dispatch(mx.zeros((2, 4, 3, 8)), k, v, cache=Cache(), scale=1.0, mask="m")  # prefill
    assert calls == [("rows", "first"), ("rows", "first"), ("mlx-lm", "m"), ("mlx-lm", "m")]


@pytest.mark.parametrize(("model", "forwards", "joined"),
                         [("gemma3", [1] * 5, 5), ("llama", [5], 0)])
def test_gpu_mode_prefills_a_burst_in_one_step_together_or_each_prompt_alone(
        monkeypatch, model, forwards, joined):
    """With its GPU measures on (row_block set), the path prefills each prompt in a
    forward of its own where a neighbour's padding could reach it (gemma3's window:
    admitted, prefilled and joined in one step), and the whole burst in one forward
    where every layer is full attention (llama: attention over each row's own keys,
    issue 28; l1's schedule, so the rows join in the next step)."""
    from batchlab.engine.core import scheduler as scheduler_module
    from batchlab.engine.core.batch import Request
    from batchlab.engine.paths.invariant.path import BlockedInvariantScheduler

    rows = []
    real = scheduler_module.prefill
    monkeypatch.setattr(scheduler_module, "prefill",
                        lambda model, caches, chunks, step: rows.append(len(chunks))
                        or real(model, caches, chunks, step))
    s = BlockedInvariantScheduler(load(model).model)
    s.insert([Request(name=f"r{i}", prompt=tuple(range(1, 3 + 2 * i)), max_tokens=2)
              for i in range(5)])
    s.step()
    assert rows == forwards
    assert len(s.decode) == joined
    s.step()
    assert len(s.decode) == 5


def test_the_dispatch_forgets_the_oldest_served_keys_past_its_bound(monkeypatch):
    from batchlab.engine.kernels import attention_dispatch

    monkeypatch.setattr(attention_dispatch, "_SERVED", attention_dispatch.OrderedDict())
    monkeypatch.setattr(attention_dispatch, "_SERVED_MAX", 2)
    caches = [type("C", (), {})() for _ in range(3)]
    keys = [mx.zeros((1,)) for _ in range(3)]
    for k, c in zip(keys, caches):
        attention_dispatch._remember(k, c)
    assert attention_dispatch._cache_of(keys[0], None) is None
    assert attention_dispatch._cache_of(keys[2], None) is caches[2]


def _run_blocked(monkeypatch, model, pads_decode: bool, seen: list, processors=None):
    """Run the path with its GPU measures (8-row GEMMs) on three ragged prompts; return
    every emission's (row, token, logprob bytes)."""
    from batchlab.engine.core.batch import Request
    from batchlab.engine.paths.invariant.path import BlockedInvariantScheduler

    s = BlockedInvariantScheduler(model)
    s.pads_decode = pads_decode
    forward = type(s.model).__call__

    def spy(self, x, cache):
        out = forward(self, x, cache=cache)
        seen.append((x.shape[0], cache[0].keys.shape[0], x.shape[1]))  # rows in, rows kept
        return out

    monkeypatch.setattr(type(s.model), "__call__", spy)
    s.insert([Request(name=f"r{i}", prompt=tuple(range(1, 3 + 3 * i)), max_tokens=4,
                      processors=processors if i == 1 else None)  # per-row: one row's
              for i in range(3)])
    out = []
    while s.num_active:
        for e in s.step():
            row = e.step_logprobs[e.row] if e.step_logprobs is not None else mx.zeros((1,))
            out.append((e.name, e.token, bytes(memoryview(row.astype(mx.float32)))))
    monkeypatch.setattr(type(s.model), "__call__", forward)
    return out


def test_the_padded_decode_batch_keeps_every_bit_and_stores_only_real_rows(monkeypatch):
    """GPU mode pads the decode batch to whole 8-row blocks (3 rows -> 8: the GEMMs get
    whole blocks, no pad or cut per projection); on the CPU, whose matmul is row-invariant,
    every row's logprobs equal the unpadded blocked decode's, and the caches keep the
    batch's 3 rows (the padding rows' keys are dropped)."""
    model = load("llama").model
    padded_seen, plain_seen = [], []
    padded = _run_blocked(monkeypatch, model, True, padded_seen)
    plain = _run_blocked(monkeypatch, model, False, plain_seen)
    assert padded == plain and len(padded) == 12
    # (rows in, rows the caches keep, tokens): the prompt batch, the prompts' last
    # tokens, then the decode forwards, padded to a block of 8 or not
    assert padded_seen == [(3, 3, 7), (3, 3, 1)] + [(8, 3, 1)] * 4
    assert plain_seen == [(3, 3, 7), (3, 3, 1)] + [(3, 3, 1)] * 4


def test_the_gqa_row_kernel_keeps_the_per_head_kernels_warps():
    """Both CUDA row kernels split a row's keys over the same warps (w, w + 4, ...): the
    reduction order that makes their bits equal (tools/h200/row_gqa_probe.py)."""
    from batchlab.engine.kernels import row_attention, row_attention_gqa

    assert row_attention.WARPS == row_attention_gqa.WARPS == 4
    assert row_attention_gqa.fits(32, 8, 128) and not row_attention_gqa.fits(32, 32, 128)
    assert not row_attention_gqa.fits(64, 4, 256)  # 4 x 16 x 256 floats: past 32 KB


def _row_kernel_stand_in(monkeypatch) -> list:
    """The row kernel made available on the CPU with the plain product standing in for
    the CUDA kernel (the CPU's matmul is row-invariant); returns its calls' row shapes."""
    from batchlab.engine.paths.invariant import rowblock

    calls = []

    def stand_in(weight, x):
        calls.append(x.shape[:-1])
        return x @ weight.T

    monkeypatch.setattr(rowblock, "row_kernel_available", lambda: True)
    monkeypatch.setattr(rowblock, "_decode_product", stand_in)
    return calls


def test_one_token_forwards_decode_by_the_row_kernel_and_prompts_by_blocks(monkeypatch):
    """Where every projection can run the row GEMM (CUDA; here a CPU stand-in, the plain
    product), the decode batch is not padded, every one-token forward (the joiners'
    first steps and the decode steps) runs its projections by that kernel and no prompt
    prefill does; the bits equal the padded blocked run's on the CPU."""
    from batchlab.engine.paths.invariant import rowblock

    model = load("llama").model
    blocked_seen = []
    blocked = _run_blocked(monkeypatch, model, True, blocked_seen)
    calls = _row_kernel_stand_in(monkeypatch)
    from batchlab.engine.paths.invariant.path import BlockedInvariantScheduler

    assert not BlockedInvariantScheduler(model).pads_decode
    by_rows_seen = []
    by_rows = _run_blocked(monkeypatch, model, False, by_rows_seen)
    assert by_rows == blocked
    assert by_rows_seen == [(3, 3, 7), (3, 3, 1)] + [(3, 3, 1)] * 4
    projections = 7 * len(model.layers) + 1  # q k v o gate up down, and the tied head
    assert len(calls) == projections * 5  # the joiners' step and 4 decode steps, no prefill
    assert set(calls) == {(3, 1)}
    assert not rowblock._PHASE.decoding  # reset after each forward


def test_the_row_gemm_takes_2d_16_bit_weights_whose_k_is_whole_8_value_loads():
    """``row_gemm.supports``: what the CUDA kernel can load (8 values a lane, bf16/fp16)
    and the input dtype its MMA reads; the answer depends on the weight alone, so a
    layer decodes the same way at every B."""
    from batchlab.engine.kernels.row_gemm import K_WARPS, TILED_FROM, SplitShape, _tiling, supports

    assert supports(mx.zeros((24, 16), mx.bfloat16)) and supports(mx.zeros((5, 8), mx.float16))
    assert not supports(mx.zeros((24, 12), mx.bfloat16))  # K = 12: not whole loads
    assert not supports(mx.zeros((24, 16), mx.float32))  # float32: cuBLAS blocks
    assert not supports(mx.zeros((2, 24, 16), mx.bfloat16))  # expert stacks: gathers
    assert not supports(mx.zeros((24, 16), mx.bfloat16), x_dtype=mx.float32)
    assert K_WARPS == 4  # the summation order both kernels share
    assert [_tiling(m) for m in (1, 8, 9, 16, 17, 64)] == [
        SplitShape(cw=1, nf=1, mt=1, u=8, xb=False), SplitShape(cw=1, nf=1, mt=1, u=8, xb=False),
        SplitShape(cw=1, nf=1, mt=1, u=8, xb=True), SplitShape(cw=1, nf=1, mt=1, u=8, xb=True),
        SplitShape(cw=2, nf=2, mt=4, u=2, xb=True), SplitShape(cw=2, nf=2, mt=4, u=2, xb=True)]
    assert TILED_FROM == 65


def test_the_row_gemm_fills_the_device_unless_told_not_to(monkeypatch):
    """By default the tiled kernel splits its classes over blocks where a 128 x 64
    tiling is under two waves, and 17-64 rows take 32-row tiles;
    ``BATCHLAB_ROW_GEMM_FILL=0`` keeps the base shapes. Shapes alone (the bits are K's),
    so this checks the choice, exactly."""
    from batchlab.engine.kernels import row_gemm as rg

    monkeypatch.setenv(rg.CLASS_WARPS_ENV, "0")  # the shapes before the class-warp kernel
    monkeypatch.setenv(rg.FILL_ENV, "0")
    assert rg._shape(256, 512, True) == rg.TILED and rg.TILED.ks == 1
    assert rg._shape(64, 512, False) == rg._tiling(64)
    monkeypatch.delenv(rg.FILL_ENV, raising=False)
    assert rg.TILED.tile == (128, 64) and rg.FILL_BELOW_BLOCKS == 264
    assert rg._shape(256, 512, True) == rg.TILED_KSPLIT  # 2 x 8 blocks
    assert rg.TILED_KSPLIT.ks == rg.K_WARPS and rg.TILED_KSPLIT.wm == rg.TILED.wm
    assert rg._shape(128, 8384, True) == rg.TILED_KSPLIT  # 1 x 131: one wave
    assert rg._shape(256, 8384, True) == rg.TILED_KSPLIT  # 2 x 131 = 262 < 264
    assert rg._shape(256, 8448, True) == rg.TILED  # 2 x 132: two waves
    assert rg._shape(17, 512, False) == rg.SPLIT_FILL == rg.SplitShape(
        cw=2, nf=2, mt=2, u=4, xb=True)
    assert rg._shape(16, 512, False) == rg._tiling(16)  # 16 rows: already one tile
    assert rg._shape(65, 512, False) == rg._tiling(65)


def test_above_16_rows_the_class_warp_kernel_runs_unless_told_otherwise(monkeypatch):
    """From 17 rows every product takes the class-warp kernel: 64 x 64 tiles up to 128
    rows, 64 x 128 from 129 (the H200's fastest shapes there);
    ``BATCHLAB_ROW_GEMM_CLASS_WARPS`` picks another candidate at every row count ("i",
    or "i,j": the i-th from TILED_FROM rows, the j-th at 17-64) or, "0", the split and
    tiled shapes; anything else is refused with what to give. 16 rows and under keep the
    split kernel. A class-warp block is four warps a spatial warp, and its shared memory
    holds both its stages and classes 1-3's partials. Shapes alone (the bits are K's)."""
    from batchlab.engine.kernels import row_gemm as rg

    monkeypatch.delenv(rg.FILL_ENV, raising=False)
    monkeypatch.delenv(rg.CLASS_WARPS_ENV, raising=False)
    default = rg.CANDIDATE_CLASS_WARPS[0]
    wide = rg.CANDIDATE_CLASS_WARPS[7]
    assert default == rg.TiledShape(wm=1, wn=1, mt=4, nf=8, stages=3, min_blocks=2,
                                    class_warps=True)
    assert wide == rg.TiledShape(wm=1, wn=2, mt=4, nf=8, stages=3, class_warps=True)
    assert wide.tile == (64, 128) and default.tile == (64, 64)
    assert rg.CLASS_WARPS_FROM == 17 and rg.CLASS_WARPS_WIDE_FROM == 129
    assert rg._shape(17, 512, False) == rg._shape(128, 8448, True) == default
    assert rg._shape(129, 512, True) == rg._shape(256, 8448, True) == wide
    monkeypatch.setenv(rg.CLASS_WARPS_ENV, "1")  # the switch holds at every row count
    assert rg._shape(256, 8448, True) == rg._shape(17, 512, False) == default
    monkeypatch.delenv(rg.CLASS_WARPS_ENV)
    assert rg._shape(16, 512, False) == rg._tiling(16)  # 16 rows and under: the split kernel
    assert rg._shape(16, 512, True) == rg.TILED_KSPLIT  # forced tiled: the old shapes
    monkeypatch.setenv(rg.CLASS_WARPS_ENV, "0")
    assert rg._shape(256, 8448, True) == rg.TILED and rg._shape(64, 512, False) == rg.SPLIT_FILL
    monkeypatch.setenv(rg.CLASS_WARPS_ENV, "2")
    assert rg._shape(256, 512, True) == rg._shape(17, 512, False) == rg.CANDIDATE_CLASS_WARPS[1]
    monkeypatch.setenv(rg.CLASS_WARPS_ENV, "1,3")
    assert rg._shape(65, 512, True) == rg.CANDIDATE_CLASS_WARPS[0]
    assert rg._shape(64, 512, False) == rg.CANDIDATE_CLASS_WARPS[2]
    for bad in ("x", "11", "0,1", "1,2,3", ""):
        with pytest.raises(ValueError, match="give 0 .* a candidate 1-10"):
            rg.class_warps_choice(bad)
    square = rg.TiledShape(wm=1, wn=1, mt=4, nf=8, stages=3, class_warps=True)
    assert square.threads == 128 and square.tile == (64, 64)
    assert square.shared_bytes == 3 * 4 * 128 * 64  # the stages: more than 3 x 16 KiB partials
    deep = rg.TiledShape(wm=2, wn=2, mt=4, nf=8, stages=2, class_warps=True)
    assert deep.threads == 512 and deep.shared_bytes == 3 * 4 * 128 * 32 * 4  # the partials
    assert rg.TILED.threads == 256 and rg.TILED.shared_bytes == 4 * 192 * 64
    # the tiled kernel's SS steps a stage: SS tiles a stage, and SS a template value
    wide = rg.TiledShape(wm=2, wn=4, mt=4, nf=4, stages=3, ss=2)
    assert wide.tile == (128, 128) and wide.shared_bytes == 3 * 2 * 256 * 64
    assert ("SS", 2) in rg._shape_template(wide) and rg.TILED.ss == 1
    assert "SS" not in dict(rg._shape_template(square))
    assert wide in rg.CANDIDATE_TILED
    assert all(s.class_warps and s.ks == 1 for s in rg.CANDIDATE_CLASS_WARPS)
    assert set(rg.CANDIDATE_CLASS_WARPS) <= set(rg.CANDIDATE_TILED)


def test_the_grouped_kernels_read_only_the_stacked_weights():
    """Both kernel sources rewrite into their grouped form (q/k/v, gate/up in one call)
    with no read of the single weight ``w`` left; an edit that moves an anchor fails."""
    from batchlab.engine.kernels import row_gemm

    for source in (row_gemm._SOURCE, row_gemm._TILED_SOURCE, row_gemm._CLASS_WARPS_SOURCE):
        grouped = row_gemm.grouped_source(source)
        assert "rg_wrow(w0, w1, w2, N0, N1" in grouped and "w_shape" not in grouped
    with pytest.raises(AssertionError, match="single weight"):
        row_gemm.grouped_source(row_gemm._SOURCE.replace("(size_t)n * K + k", "(size_t)n*K + k"))


def test_the_kernel_text_mlx_is_given_is_the_code_without_comments_or_indentation():
    """``row_gemm.compact``: MLX rebuilds and hashes a custom kernel's text on every call,
    so the text drops comments, indentation and blank lines, and nothing else (a ``//``
    inside a string stays); every kernel reads x's rows from its leading axes (no reshape
    a call)."""
    from batchlab.engine.kernels import row_gemm

    assert row_gemm.compact('  int a = 1;  // one\n\n    // gone\n  f("a // b");\n') == (
        'int a = 1;\nf("a // b");\n')
    for source in (row_gemm._HEADER, row_gemm._SOURCE, row_gemm._TILED_SOURCE,
                   row_gemm._CLASS_WARPS_SOURCE, row_gemm._COMBINE_SOURCE):
        text = row_gemm.compact(source)
        assert "//" not in text and len(text) < len(source)
        assert text.split() == " ".join(
            line.partition("//")[0] for line in source.splitlines()).split()
    for source in (row_gemm._SOURCE, row_gemm._TILED_SOURCE, row_gemm._CLASS_WARPS_SOURCE):
        assert "const int M = rg_rows(x_shape, x_ndim);" in source and "x_shape[0]" not in source


def test_the_one_token_phase_is_per_thread():
    """A server building one scheduler's decode forward while another thread builds a
    prompt's prefill: the prefill must not see the decode's phase (its projections would
    take the row kernel on CUDA, and that prompt's bits would differ from its run alone)."""
    import threading

    from batchlab.engine.paths.invariant import rowblock

    inside, seen = threading.Event(), []

    def decode():
        with rowblock.decoding_by_rows():
            inside.set()
            release.wait(5)

    release = threading.Event()
    t = threading.Thread(target=decode)
    t.start()
    inside.wait(5)
    seen.append(rowblock._PHASE.decoding)
    release.set()
    t.join()
    assert seen == [False]


def test_grouped_row_gemms_keep_every_bit_in_one_call_per_group(monkeypatch):
    """BATCHLAB_ROW_GEMM_GROUPS=1: a layer's q/k/v and gate/up each take one row GEMM call
    for their shared input, every member slicing its own columns; the bits equal the
    blocked run's (here with stand-ins that compute each weight's product alone)."""
    from batchlab.engine.paths.invariant import rowblock

    model = load("llama").model
    blocked = _run_blocked(monkeypatch, model, True, [])
    single, grouped = [], []

    def one(weight, x):
        single.append(weight.shape)
        return x @ weight.T

    def group(weights, x):
        grouped.append(len(weights))
        return mx.concatenate([x @ w.T for w in weights], axis=-1)

    monkeypatch.setenv(rowblock.ROW_GROUPS_ENV, "1")
    monkeypatch.setattr(rowblock, "row_kernel_available", lambda: True)
    monkeypatch.setattr(rowblock, "_decode_product", one)
    monkeypatch.setattr(rowblock, "_group_product", group)
    assert _run_blocked(monkeypatch, model, False, []) == blocked
    layers = len(model.layers)
    steps = 5  # the joiners' first step and 4 decode steps
    assert sorted(grouped) == sorted([3, 2] * layers * steps)
    assert len(single) == (2 * layers + 1) * steps  # o, down and the tied head alone
    for bad in ("yes", "2", " 1"):
        monkeypatch.setenv(rowblock.ROW_GROUPS_ENV, bad)
        with pytest.raises(ValueError, match="give 1"):
            rowblock.grouped_products()


def test_a_row_with_logits_processors_decodes_by_the_row_kernel_too(monkeypatch):
    """Per-row sampling beside the row kernel: a batch where one row carries logits
    processors takes the processed forward (``_processed_logprobs``) every step; its
    projections still run the row kernel (on CUDA, else that step's rows would change
    kernel with their neighbour's sampling settings) and no prefill does."""
    from batchlab.engine.core.processors import ProcessorParams

    model = load("llama").model
    penalty = ProcessorParams(repetition_penalty=1.3)
    blocked = _run_blocked(monkeypatch, model, True, [], processors=penalty)
    calls = _row_kernel_stand_in(monkeypatch)
    assert _run_blocked(monkeypatch, model, False, [], processors=penalty) == blocked
    assert len(calls) == (7 * len(model.layers) + 1) * 5 and set(calls) == {(3, 1)}


def test_the_gqa_row_kernel_loads_one_key_at_a_time_unless_asked(monkeypatch):
    from batchlab.engine.kernels import row_attention_gqa as gqa

    monkeypatch.delenv(gqa.UNROLL_ENV, raising=False)
    assert gqa.unroll() == 1  # the kernel the H200's invariant gate validated
    assert gqa.KEYS_AHEAD == 1  # read once, at import
    monkeypatch.setenv(gqa.UNROLL_ENV, "4")
    assert gqa.unroll() == 4
    for bad in ("3", "on", "16"):
        monkeypatch.setenv(gqa.UNROLL_ENV, bad)
        with pytest.raises(ValueError, match="one of 1, 2, 4, 8"):
            gqa.unroll()
    # the loads move, not the arithmetic: keys in order w, w + NW, ... per warp
    assert "r0 += NW * U" in gqa._SOURCE and "min(r0 + u * NW, n - 1)" in gqa._SOURCE
