"""The engine's batch caches: exact values, and bit-for-bit against mlx-lm's batch caches.

mlx-lm's ``BatchKVCache`` / ``BatchRotatingKVCache`` / ``ArraysCache`` are the oracle
here (only tests may import them). Each differential test drives the same operation
sequence (right-padded prefill, decode past the window, filter, extend, extract, merge)
through both and compares every observable to the bit. No model is loaded.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import pathlib

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import (
    ArraysCache,
    BatchKVCache,
    BatchRotatingKVCache,
    CacheList,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
)

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.caches.mask import causal_mask, ring_mask, ssm_mask
from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.caches.single import kv_row
from batchlab.engine.caches.state import BatchList, BatchState
from batchlab.engine.core import layers

ENGINE = pathlib.Path(__file__).resolve().parents[2] / "batchlab" / "engine"
T, F = True, False


# -- comparing to the bit ------------------------------------------------------------


def bits(x: mx.array) -> np.ndarray:
    if x.dtype in (mx.bool_, mx.int32, mx.int64, mx.uint32):
        return np.asarray(x)
    return np.asarray(x.view({2: mx.uint16, 4: mx.uint32}[x.dtype.size]))


def same(a, b, what: str) -> None:
    """Equal bits, shape and dtype for arrays; equality for everything else."""
    if isinstance(a, mx.array) or isinstance(b, mx.array):
        assert isinstance(a, mx.array) and isinstance(b, mx.array), f"{what}: {a!r} vs {b!r}"
        assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
        assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
        assert np.array_equal(bits(a), bits(b)), f"{what}: values differ"
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{what}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{what}[{i}]")
    else:
        assert a == b, f"{what}: {a!r} != {b!r}"


def same_cache(ours, theirs, what: str) -> None:
    """Every field a model or the scheduler can read."""
    fields = ["keys", "values", "offset", "left_padding", "_idx", "_offset", "rotated",
              "max_size", "lengths", "cache", "keep"]  # fmt: skip
    for name in fields:
        if hasattr(theirs, name):
            same(getattr(ours, name), getattr(theirs, name), f"{what}.{name}")
    same(ours.state, theirs.state, f"{what}.state")
    same(ours.nbytes, theirs.nbytes, f"{what}.nbytes")
    for name in ("is_trimmable", "empty", "size"):  # the engine's batch caches have none
        if hasattr(ours, name) and hasattr(theirs, name):
            same(getattr(ours, name)(), getattr(theirs, name)(), f"{what}.{name}()")
    if hasattr(theirs, "batch_size"):
        same(ours.batch_size, theirs.batch_size, f"{what}.batch_size")


def layout_mask(cache, n: int, window):
    """``cache.make_mask`` with mlx-lm's layout: l1 drops an all-True decode mask on the
    CPU backend (``test_dropped_all_true_mask_keeps_attention_bits`` checks that costs no
    bit), so the layout comparison asks for the mask it would pass on a GPU."""
    keep = staticmethod(lambda: False)
    with patched(type(cache), "drops_all_true_decode_mask", keep):
        return cache.make_mask(n, window_size=window)


@contextlib.contextmanager
def patched(owner, name: str, value):
    old = owner.__dict__.get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if old is None:
            delattr(owner, name)
        else:
            setattr(owner, name, old)


# -- paired driving -------------------------------------------------------------------


class Pair:
    """The engine's cache and mlx-lm's, fed identical inputs, compared after every op."""

    def __init__(self, ours, theirs, rng: np.random.Generator, dtype=mx.float32):
        self.ours, self.theirs, self.rng, self.dtype = ours, theirs, rng, dtype
        self.log: list[str] = []
        self.check("init")

    def check(self, what: str) -> None:
        self.log.append(what)
        same_cache(self.ours, self.theirs, " > ".join(self.log[-4:]))

    @property
    def batch(self) -> int:
        return len(self.theirs.offset.tolist())

    def kv(self, n: int) -> tuple[mx.array, mx.array]:
        x = self.rng.standard_normal((2, self.batch, 2, n, 3)).astype(np.float32)
        return mx.array(x[0]).astype(self.dtype), mx.array(x[1]).astype(self.dtype)

    def forward(self, n: int, windows=(None,)) -> None:
        """What one attention layer does: make_mask, then update_and_fetch."""
        for w in windows:
            same(layout_mask(self.ours, n, w), self.theirs.make_mask(n, window_size=w),
                 f"{self.log[-1]} > make_mask({n}, window={w})")  # fmt: skip
        k, v = self.kv(n)
        same(self.ours.update_and_fetch(k, v), self.theirs.update_and_fetch(k, v),
             f"{self.log[-1]} > update_and_fetch({n})")  # fmt: skip
        self.check(f"forward({n})")

    def prefill(self, lengths: list[int], chunk: int, windows=(None,)) -> None:
        """mlx-lm's prompt(): right-pad, prepare (if padded), chunks, finalize."""
        width = max(lengths)
        padding = [width - n for n in lengths]
        if max(padding) > 0:
            for c in (self.ours, self.theirs):
                c.prepare(lengths=lengths, right_padding=padding)
            self.check(f"prepare({lengths})")
        for n in chunks(width, chunk):
            self.prefill_chunk(n, windows)
        if max(padding) > 0:
            self.ours.finalize()
            self.theirs.finalize()
            self.check("finalize")

    def prefill_chunk(self, n: int, windows) -> None:
        self.forward(n, windows)

    def filter(self, keep: list[int]) -> None:
        self.ours.filter(keep)
        self.theirs.filter(keep)
        self.check(f"filter({keep})")

    def extend(self, other: Pair) -> None:
        self.ours.extend(other.ours)
        self.theirs.extend(other.theirs)
        self.check(f"extend(B+{other.batch})")

    def split(self, take: list[int]) -> Pair:
        """mlx-lm's PromptProcessingBatch.split: copy, then filter both sides."""
        rest = [i for i in range(self.batch) if i not in take]
        taken = Pair(copy.deepcopy(self.ours), copy.deepcopy(self.theirs), self.rng, self.dtype)
        taken.filter(take)
        if rest:
            self.filter(rest)
        return taken

    def extract(self, idx: int):
        ours, theirs = self.ours.extract(idx), self.theirs.extract(idx)
        assert type(ours) is type(theirs)
        same_cache(ours, theirs, f"{self.log[-1]} > extract({idx})")
        return ours, theirs


def chunks(width: int, chunk: int) -> list[int]:
    """Prefill chunk sizes, never a trailing 1: a 1-token update is a decode write to the
    caches (mlx-lm dispatches on N == 1), and BatchGenerator never prefills 1 token."""
    sizes = [min(chunk, width - s) for s in range(0, width, chunk)]
    if len(sizes) > 1 and sizes[-1] == 1:
        sizes[-2:] = [sizes[-2] + 1]
    return sizes


def new_kv(B: int, rng, lp=None) -> Pair:
    if lp is not None:
        return Pair(BatchKV(lp), BatchKVCache(lp), rng)
    fresh = [KVCache() for _ in range(B)]
    return Pair(layers.merge_rows(fresh), KVCache.merge(fresh), rng)


def new_ring(B: int, max_size: int, rng) -> Pair:
    fresh = [RotatingKVCache(max_size) for _ in range(B)]
    return Pair(layers.merge_rows(fresh), RotatingKVCache.merge(fresh), rng)


def random_lengths(rng, B: int, most: int) -> list[int]:
    return [int(n) for n in rng.integers(1, most + 1, size=B)]


def random_keep(rng, B: int) -> list[int]:
    keep = sorted(rng.choice(B, size=int(rng.integers(1, B + 1)), replace=False).tolist())
    return keep if rng.random() < 0.7 else [int(i) for i in rng.permutation(keep)]


# -- (a) exact values -------------------------------------------------------------------


def test_causal_mask_literals():
    assert causal_mask(1, 3, left_padding=[1, 0, 2]).tolist() == [
        [[[F, T, T, T]]], [[[T, T, T, T]]], [[[F, F, T, T]]]
    ]  # fmt: skip
    assert causal_mask(3, 0, [0]).tolist() == [[[[T, F, F], [T, T, F], [T, T, T]]]]
    assert causal_mask(2, 2, [0], window=2).tolist() == [[[[F, T, T, F], [F, F, T, T]]]]


def test_ring_mask_literal_matches_docstring():
    mask = ring_mask(1, max_size=4, seen=9, idx=1, rotated=True, left_padding=np.array([2, 0]),
                     left_padding_max=2)
    assert mask[:, 0, 0].tolist() == [[T, T, F, T], [T, T, T, T]]


def test_ssm_mask_literals():
    assert ssm_mask(3, None, [3, 1]).tolist() == [[T, T, T], [T, F, F]]
    assert ssm_mask(3, [1, 0], [3, 2]).tolist() == [[F, T, T], [T, T, F]]
    assert ssm_mask(2, None, None) is None


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_dropped_all_true_ssm_mask_keeps_bits(dtype):
    """State-space layers apply their mask as ``where(mask, x, 0)`` (qwen3.5, mamba2,
    lfm2 inputs), ``where(mask, state, old)`` (gated delta) and ``x * mask`` (mamba2's
    SSM): each leaves every bit of ``x`` as it was where the mask is True, which is why
    l1 may drop an all-True decode mask on the CPU backend."""
    x = mx.random.normal((3, 1, 8), key=mx.random.key(3)).astype(dtype) * 1e3
    x = mx.concatenate([x, mx.array([[[-0.0, float("inf"), -float("inf")] + [1e-30] * 5]],
                                    dtype)], axis=0)
    keep = mx.ones((4, 1), dtype=mx.bool_)[..., None]
    with mx.stream(mx.cpu):
        for kept in (mx.where(keep, x, 0), mx.where(keep, x, x * 2), x * keep):
            assert np.array_equal(bits(kept), bits(x))
    state = BatchState(2, [0, 0, 0])
    assert state.make_mask(1) is None and state.make_mask(2) is not None  # decode only


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_dropped_all_true_mask_keeps_attention_bits(dtype):
    """l1 passes no decode mask where no row is padded, on the CPU backend only: there
    SDPA applies a bool mask as a select, so all True must equal None to the bit."""
    cache = BatchKV([0, 0, 0])
    k = mx.random.normal((3, 2, 37, 16), key=mx.random.key(1)).astype(dtype)
    cache.update_and_fetch(k, k * 0.5)
    assert cache.make_mask(1) is None
    with patched(BatchKV, "drops_all_true_decode_mask", staticmethod(lambda: False)):
        full = cache.make_mask(1)
    assert full.shape == (3, 1, 1, 38) and full.all().item()
    keys, values = cache.update_and_fetch(k[:, :, :1], k[:, :, :1])
    q = mx.random.normal((3, 4, 1, 16), key=mx.random.key(2)).astype(dtype)
    with mx.stream(mx.cpu):
        masked = mx.fast.scaled_dot_product_attention(q, keys, values, scale=0.25, mask=full)
        bare = mx.fast.scaled_dot_product_attention(q, keys, values, scale=0.25, mask=None)
    assert np.array_equal(bits(masked), bits(bare))
    padded = BatchKV([1, 0, 0])
    padded.update_and_fetch(k, k)
    assert padded.make_mask(1).shape == (3, 1, 1, 38)  # a padded row keeps its mask


def test_batch_kv_docstring_example():
    cache = BatchKV([1, 3, 0])
    k = mx.zeros((3, 1, 4, 2))
    cache.update_and_fetch(k, k)
    assert cache.offset.tolist() == [3, 1, 4]
    assert cache.offset.dtype == mx.int32
    assert cache._idx == 4 and cache.keys.shape == (3, 1, 256, 2)
    assert cache.make_mask(1)[:, 0, 0].tolist() == [[F, T, T, T, T], [F, F, F, T, T], [T] * 5]


def test_batch_kv_finalize_rolls_right_padding_left():
    cache = layers.merge_rows([KVCache(), KVCache()])
    cache.prepare(lengths=[2, 1], right_padding=[0, 1])
    k = mx.array([[1.0, 2.0], [7.0, -1.0]])[:, None, :, None]  # -1: key of a pad token
    cache.update_and_fetch(k, k)
    cache.finalize()
    # the roll runs over all 256 columns: the pad key moves to column 2, past _idx
    assert cache.keys[:, 0, :3, 0].tolist() == [[1.0, 2.0, 0.0], [0.0, 7.0, -1.0]]
    assert cache.left_padding.tolist() == [0, 1] and cache.offset.tolist() == [2, 1]


def test_batch_kv_filter_extend_extract_merge_literals():
    cache = BatchKV([3, 1, 2])
    ramp = mx.arange(15, dtype=mx.float32).reshape(3, 1, 5, 1)
    cache.update_and_fetch(ramp, ramp)
    cache.filter([0, 2])  # both rows pad >= 2: two shared columns go
    assert cache.left_padding.tolist() == [1, 0] and cache.offset.tolist() == [2, 3]
    assert cache._idx == 3 and cache.keys.shape[2] == 254

    other = BatchKV([0])
    other.update_and_fetch(mx.ones((1, 1, 5, 1)), mx.ones((1, 1, 5, 1)))
    cache.extend(other)  # write columns 3 and 5 line up at 5
    assert cache.left_padding.tolist() == [3, 2, 0] and cache.offset.tolist() == [2, 3, 5]
    assert cache._idx == 5 and cache.keys.shape[2] == 256

    row = cache.extract(1)
    assert type(row) is KVCache and row.offset == 3
    assert row.keys[0, 0, :, 0].tolist() == [12.0, 13.0, 14.0]
    merged = BatchKV.merge([row, KVCache(), cache.extract(2)])
    assert merged.left_padding.tolist() == [2, 5, 0] and merged.offset.tolist() == [3, 0, 5]
    assert merged._idx == 5 and merged.keys.shape[2] == 5


def test_ring_wraps_past_window():
    def col(*xs):
        return mx.array(xs, dtype=mx.float32)[:, None, None, None]

    ring = layers.merge_rows([RotatingKVCache(4), RotatingKVCache(4)])
    ring.prepare(lengths=[2, 0], right_padding=[0, 2])
    ring.update_and_fetch(mx.array([[1.0, 2.0], [-1.0, -2.0]])[:, None, :, None],
                          mx.zeros((2, 1, 2, 1)))  # fmt: skip
    ring.finalize()
    assert ring.left_padding.tolist() == [0, 2] and ring.offset.tolist() == [2, 0]
    ring.update_and_fetch(col(3, 10), col(0, 0))
    ring.update_and_fetch(col(4, 11), col(0, 0))
    assert ring._idx == 4 and not ring.rotated
    assert ring.make_mask(1, window_size=4)[:, 0, 0].tolist() == [[T, T, T, T], [T, F, T, T]]
    keys, _ = ring.update_and_fetch(col(5, 12), col(0, 0))
    assert keys[:, 0, :, 0].tolist() == [[5.0, 2.0, 3.0, 4.0], [12.0, -2.0, 10.0, 11.0]]
    assert ring._idx == 1 and ring.rotated and ring._offset == 5
    assert ring.left_padding.tolist() == [-1, 1] and ring.offset.tolist() == [5, 3]
    # the next write lands on row 1's last padding column: nothing left to hide, so the
    # mask is all True, and dropped on the CPU backend (as BatchKV's; exact there)
    assert layout_mask(ring, 1, None)[:, 0, 0].tolist() == [[T, T, T, T], [T, T, T, T]]
    assert ring.make_mask(1) is None
    assert ring.make_mask(1, return_array=True).shape == (2, 1, 1, 4)  # asked for an array
    row = ring.extract(1)  # temporal order, padding cut: 10 11 12
    assert row.keys[0, 0, :, 0].tolist() == [10.0, 11.0, 12.0] and row.offset == 3


def test_ring_prefill_keeps_max_size_plus_chunk_minus_one():
    ring = BatchRing(4, [0])
    ones = mx.ones((1, 1, 3, 1))
    ring.update_and_fetch(ones, ones)
    keys, _ = ring.update_and_fetch(mx.ones((1, 1, 5, 1)), mx.ones((1, 1, 5, 1)))
    assert keys.shape[2] == 8  # 3 kept (= max_size - 1) + 5
    assert ring.make_mask(2).shape == (1, 1, 2, 5) and ring.left_padding.tolist() == [0]
    keys, _ = ring.update_and_fetch(mx.ones((1, 1, 2, 1)), mx.ones((1, 1, 2, 1)))
    assert keys.shape[2] == 5 and ring.left_padding.tolist() == [-5]
    ring.update_and_fetch(mx.ones((1, 1, 1, 1)), mx.ones((1, 1, 1, 1)))  # first decode cuts
    assert ring.keys.shape[2] == 4 and ring._idx == 1 and ring.rotated
    assert ring.left_padding.tolist() == [-7] and ring.offset.tolist() == [11]


def test_ring_one_token_prefill_chunk_is_a_decode_write():
    """mlx-lm oddity, reproduced: N == 1 takes the decode path, which refuses a pending
    right-padding roll, so a padded prefill whose last chunk is 1 token raises."""
    for ring in (BatchRing(4, [0, 0]), BatchRotatingKVCache(4, [0, 0])):
        ring.prepare(lengths=[3, 2], right_padding=[0, 1])
        ring.update_and_fetch(mx.ones((2, 1, 2, 1)), mx.ones((2, 1, 2, 1)))
        with pytest.raises(RuntimeError, match="finalize"):
            ring.update_and_fetch(mx.ones((2, 1, 1, 1)), mx.ones((2, 1, 1, 1)))


def test_ring_multi_token_step_after_wrap_hides_a_real_key_like_mlx_lm():
    """mlx-lm oddity, reproduced: for N > 1 on a wrapped ring, make_mask trims the padding
    by ``_idx - max_size + 1`` with ``_idx`` the ring pointer, but the update first unrolls
    the ring (``_idx`` = max_size) and trims 1. A row still padded then loses its oldest
    real key: here row 1's prompt token (key 7, column 4) is masked. BatchGenerator only
    feeds 1 token after prefill, so its runs never hit this."""
    for ring in (BatchRing(8, [0, 0]), BatchRotatingKVCache(8, [0, 0])):
        ring.prepare(lengths=[7, 1], right_padding=[0, 6])
        x = mx.arange(14, dtype=mx.float32).reshape(2, 1, 7, 1)
        ring.update_and_fetch(x, x)
        ring.finalize()
        for t in (100.0, 101.0):
            ring.update_and_fetch(mx.full((2, 1, 1, 1), t), mx.full((2, 1, 1, 1), t))
        mask = ring.make_mask(2)
        keys, _ = ring.update_and_fetch(mx.full((2, 1, 2, 1), 20.0), mx.full((2, 1, 2, 1), 20.0))
        assert keys[1, 0, :, 0].tolist() == [10, 11, 12, 13, 7, 100, 101, 20, 20]
        assert ring.left_padding.tolist() == [-2, 4]  # column 4 is real ...
        assert mask[1, 0, 0].tolist() == [F, F, F, F, F, T, T, T, F]  # ... but masked


def test_state_bookkeeping_literals():
    fresh = layers.merge_rows([ArraysCache(2), ArraysCache(2)])
    assert fresh.left_padding.tolist() == [0, 0]
    assert fresh.make_mask(2).tolist() == [[T, T], [T, T]]  # an array, not None
    fresh.prepare(lengths=[3, 1], right_padding=[0, 2])
    assert fresh.make_mask(3).tolist() == [[T, T, T], [T, F, F]]
    fresh[0] = mx.ones((2, 3))
    fresh.advance(3)
    assert fresh.lengths.tolist() == [0, -2] and fresh.left_padding.tolist() == [-3, -3]
    fresh.finalize()
    assert fresh.make_mask(1) is None and fresh.batch_size == 2
    other = BatchState(2, [0])
    fresh.extend(other)
    assert fresh[0].tolist() == [[1.0] * 3] * 2 + [[0.0] * 3] and fresh[1] is None
    assert fresh.left_padding.tolist() == [0, 0, 0] and fresh.lengths is None
    assert fresh.extract(2)[1] is None and fresh.extract(0)[0].shape == (1, 3)


def test_batch_caches_have_no_trim_size_empty_nor_prepared_left_padding():
    """mlx-lm's batch caches have them for its BatchGenerator's callers; nothing the engine
    runs calls them on a batch cache (kv.py's module doc), so the engine's do not: a caller
    that expects them gets an AttributeError or a TypeError, not a silent no-op."""
    rng = np.random.default_rng(5)
    state = layers.merge_rows([ArraysCache(1), ArraysCache(1)])
    caches = [new_kv(2, rng).ours, new_ring(2, 8, rng).ours, state,
              layers.merge_rows([CacheList(ArraysCache(1), KVCache())] * 2)]
    for cache in caches:
        for name in ("trim", "size", "empty", "is_trimmable"):
            assert not hasattr(cache, name), (type(cache).__name__, name)
        with pytest.raises(TypeError, match="left_padding"):
            cache.prepare(left_padding=[2, 0])


def test_pending_right_padding_follows_filter_and_blocks_extend():
    """mlx-lm keeps a pending roll for the old rows after filter (never hit by its
    BatchGenerator, which finalizes first); here it is filtered too."""
    for cache in (BatchKV([0, 0, 0]), BatchRing(8, [0, 0, 0])):
        cache.prepare(lengths=[3, 1, 2], right_padding=[0, 2, 1])
        cache.update_and_fetch(mx.ones((3, 1, 3, 1)), mx.ones((3, 1, 3, 1)))
        cache.filter([2, 1])
        with pytest.raises(ValueError, match="finalize"):
            cache.extend(type(cache)(*([8] if isinstance(cache, BatchRing) else []), [0]))
        cache.finalize()
        assert cache.left_padding.tolist() == [1, 2] and cache.offset.tolist() == [2, 1]


def test_deepcopy_is_independent():
    cache = BatchKV([0, 1])
    k = mx.ones((2, 1, 2, 1))
    cache.update_and_fetch(k, k)
    twin = copy.deepcopy(cache)
    cache.update_and_fetch(mx.ones((2, 1, 1, 1)), mx.ones((2, 1, 1, 1)))
    cache.filter([1])
    assert twin.offset.tolist() == [2, 1] and twin._idx == 2 and twin.keys.shape[0] == 2


class FakeModel:
    def __init__(self, caches=None):
        self.layers = [object(), object()]
        if caches is not None:
            self.make_cache = lambda: caches()


def test_make_batch_caches_follows_make_cache():
    model = FakeModel(lambda: [KVCache(), RotatingKVCache(8), ArraysCache(2),
                               CacheList(ArraysCache(1), KVCache())])  # fmt: skip
    caches = layers.make_batch_caches(model, 3)
    assert [type(c) for c in caches] == [BatchKV, BatchRing, BatchState, BatchList]
    assert caches[1].max_size == 8 and len(caches[2].cache) == 2
    assert caches[0].offset.tolist() == [0, 0, 0]
    assert [type(c) for c in caches[3].caches] == [BatchState, BatchKV]
    assert [type(c) for c in layers.make_batch_caches(FakeModel(), 2)] == [BatchKV] * 2
    with pytest.raises(ValueError, match="no batch form"):
        layers.make_batch_caches(FakeModel(lambda: [QuantizedKVCache()]), 2)


def test_layer_helpers_round_trip():
    model = FakeModel(lambda: [KVCache(), RotatingKVCache(4), ArraysCache(1)])
    caches = layers.make_batch_caches(model, 2)
    layers.prepare_layers(caches, lengths=[2, 1], right_padding=[0, 1])
    k = mx.ones((2, 1, 2, 1))
    for c in caches[:2]:
        c.update_and_fetch(k, k)
    caches[2][0] = mx.ones((2, 4))
    caches[2].advance(2)
    layers.finalize_layers(caches)
    assert len(layers.layer_state(caches)) == 4 + 4 + 1  # keys, values, offset, left_padding
    rows = [layers.extract_layers(caches, i) for i in range(2)]
    merged = layers.merge_layers(rows)
    assert [c.offset.tolist() for c in merged[:2]] == [[2, 1], [2, 1]]
    assert layers.filter_layers(merged, [1]) is merged and merged[0].offset.tolist() == [1]


# -- the rule: the engine owns its batch caches -------------------------------------------

FORBIDDEN = {"BatchKVCache", "BatchRotatingKVCache", "BatchGenerator", "dynamic_roll"}


def forbidden_uses(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [a.name for a in node.names if a.name in FORBIDDEN or a.name == "*"]
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN:
            found.append(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN:
            found.append(node.attr)
        elif isinstance(node, ast.Constant) and node.value in FORBIDDEN:
            found.append(node.value)  # getattr(cache_module, "BatchKVCache")
    return found


def test_rule_checker_catches_each_form():
    for src in ["from mlx_lm.models.cache import BatchKVCache",
                "import mlx_lm.models.cache as c\nc.BatchRotatingKVCache(4, [0])",
                "from mlx_lm.generate import *", "from mlx_lm.models.cache import dynamic_roll",
                "getattr(m, 'BatchGenerator')"]:  # fmt: skip
        assert forbidden_uses(src), src
    assert not forbidden_uses("from mlx_lm.models.cache import KVCache")


def test_engine_does_not_use_mlx_lm_batch_caches():
    sources = sorted(ENGINE.glob("**/*.py"))
    assert any(p.name == "kv.py" for p in sources)
    for path in sources:
        assert not forbidden_uses(path.read_text()), f"{path.name} uses mlx-lm batch internals"


# -- (b) differential: random operation sequences against mlx-lm ---------------------------

SEEDS = range(6)


def run_scenario(new, single, rng, *, B: int, most: int, windows, decode: int) -> Pair:
    """A batch's life in mlx-lm's BatchGenerator, randomized; returns the final pair.

    1. Running batch A: chunked right-padded prefill, a few decodes, rows evicted.
    2. Prompt batch P: a first chunk; new rows (no keys yet) join; a chunk for all.
    3. P is split (copied, both sides filtered); the split rows decode once alone and
       join the END of A, which decodes ``decode`` more steps.
    4. Every row is extracted and merged again (with a fresh row and single-stream rows
       made by mlx-lm's own single caches), then decodes; a last group joins.
    """
    chunk = int(rng.choice([2, 3, 5, 64]))
    a = new(B)
    a.prefill(random_lengths(rng, a.batch, most), chunk, windows)
    for _ in range(int(rng.integers(1, 4))):
        a.forward(1, windows)
    a.filter(random_keep(rng, a.batch))

    p = new(int(rng.integers(1, 4)))
    p.prefill(random_lengths(rng, p.batch, most), chunk, windows)
    joiners = new(int(rng.integers(1, 3)))
    if rng.random() < 0.5:
        p.extend(joiners)
    else:  # the side without keys first
        joiners.extend(p)
        p = joiners
    p.prefill(random_lengths(rng, p.batch, most), chunk, windows)
    g = p.split(random_keep(rng, p.batch))
    g.forward(1, windows)
    a.extend(g)
    for _ in range(decode):
        a.forward(1, windows)

    a.extract(int(rng.integers(a.batch)))
    rows = [a.extract(i) for i in range(a.batch)]
    rows += [(c, copy.deepcopy(c)) for c in single(rng)]
    ours = layers.merge_rows([r[0] for r in rows])
    same_cache(ours, type(a.theirs).merge([r[1] for r in rows]), "merge")
    same_cache(layers.merge_rows([r[1] for r in rows]), ours, "merge of mlx-lm's own rows")
    c = Pair(ours, type(a.theirs).merge([r[1] for r in rows]), rng, a.dtype)
    for _ in range(decode // 2 + 1):
        c.forward(1, windows)
    d = new(int(rng.integers(1, 3)))
    d.prefill(random_lengths(rng, d.batch, 3), 64, windows)
    d.forward(1, windows)
    c.extend(d)
    for _ in range(decode // 2 + 1):
        c.forward(1, windows)
    return c


def single_rows(make, rng, sizes) -> list:
    """Single-row caches filled by their own update_and_fetch (as plain generation does)."""
    rows = []
    for n in sizes:
        cache = make()
        x = mx.array(rng.standard_normal((1, 2, n, 3)).astype(np.float32))
        cache.update_and_fetch(x, x)
        for _ in range(int(rng.integers(0, 12))):
            cache.update_and_fetch(x[:, :, :1], x[:, :, :1])
        rows.append(cache)
    return rows + [make()]


@pytest.mark.parametrize("start", ["merge", "left_padding"])  # no prepare(left_padding=)
@pytest.mark.parametrize("B", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", SEEDS)
def test_kv_matches_mlx_lm(seed: int, B: int, start: str):
    rng = np.random.default_rng(1000 * B + 10 * seed + len(start))

    def new(B: int) -> Pair:
        if start == "merge" or rng.random() < 0.5:
            return new_kv(B, rng)
        lp = random_lengths(rng, B, 3)
        return Pair(BatchKV(lp), BatchKVCache(lp), rng)

    def single(r):
        return single_rows(KVCache, r, [2, 5])

    decode = int(rng.integers(3, 10))
    c = run_scenario(new, single, rng, B=B, most=12, windows=(None,), decode=decode)
    c.forward(int(rng.integers(2, 5)))  # a multi-token step after decoding
    c.forward(1)


@pytest.mark.parametrize("max_size", [4, 8])
@pytest.mark.parametrize("B", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", SEEDS)
def test_ring_matches_mlx_lm(seed: int, B: int, max_size: int):
    rng = np.random.default_rng(10_000 * max_size + 100 * B + seed)
    windows = (None, max_size, max_size - 1)  # gemma/gpt_oss pass their window

    def make_single():
        return RotatingKVCache(max_size)

    decode = int(rng.integers(2, 4)) * max_size + int(rng.integers(0, 3))
    c = run_scenario(lambda n: new_ring(n, max_size, rng),
                 lambda r: single_rows(make_single, r, [2, max_size + 3]),
                 rng, B=B, most=2 * max_size + 3, windows=windows, decode=decode)  # fmt: skip
    c.forward(int(rng.integers(2, 4)), windows)  # a multi-token step into a wrapped ring
    c.forward(1, windows)


def test_state_and_empty_extend_match_mlx_lm():
    rng = np.random.default_rng(11)
    for pair in (new_kv(2, rng), new_ring(2, 8, rng)):
        pair.extend(new_kv(1, rng) if isinstance(pair.ours, BatchKV) else new_ring(1, 8, rng))
        pair.check("empty extend")
        pair.prefill([3, 5, 2], 64)
        pair.forward(1)
        twin = type(pair.ours)(*([8] if isinstance(pair.ours, BatchRing) else []), [0])
        twin.state = pair.ours.state
        same_cache(twin, pair.theirs, "state round trip")


def test_ring_matches_mlx_lm_in_bfloat16():
    rng = np.random.default_rng(7)
    fresh = [RotatingKVCache(4) for _ in range(3)]
    a = Pair(layers.merge_rows(fresh), RotatingKVCache.merge(fresh), rng, dtype=mx.bfloat16)
    a.prefill([5, 1, 3], 64, (4,))
    for _ in range(9):
        a.forward(1, (4,))


def state_forward(pair: Pair, n: int) -> None:
    """What a state-space layer does: make_mask, read lengths, write state, advance."""
    ours, theirs = pair.ours, pair.theirs
    # mlx-lm's layout: on the CPU backend l1 drops a decode mask that keeps every step
    # (test_dropped_all_true_ssm_mask_keeps_bits), so compare the mask a GPU would get
    with patched(type(ours), "drops_all_true_decode_mask", staticmethod(lambda: False)):
        same(ours.make_mask(n), theirs.make_mask(n), f"{pair.log[-1]} > make_mask({n})")
    B = pair.batch
    conv = mx.array(pair.rng.standard_normal((B, 3, 4)).astype(np.float32))
    ssm = mx.array(pair.rng.standard_normal((B, 2, 4, 4)).astype(np.float32))
    for c in (ours, theirs):
        c[0], c[1] = conv, ssm
        c.advance(n)
    pair.check(f"state_forward({n})")


class StatePair(Pair):
    @property
    def batch(self) -> int:
        return self.theirs.batch_size

    def prefill_chunk(self, n: int, windows) -> None:
        state_forward(self, n)


def new_state(B: int, rng) -> StatePair:
    fresh = [ArraysCache(2) for _ in range(B)]
    return StatePair(layers.merge_rows(fresh), ArraysCache.merge(fresh), rng)


@pytest.mark.parametrize("B", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", SEEDS)
def test_state_matches_mlx_lm(B: int, seed: int):
    rng = np.random.default_rng(500 + 10 * B + seed)
    a = new_state(B, rng)
    a.prefill(random_lengths(rng, B, 6), int(rng.choice([2, 64])))
    for _ in range(2):
        state_forward(a, 1)
    a.filter(random_keep(rng, a.batch))
    b = new_state(int(rng.integers(1, 4)), rng)
    if seed % 2:  # equal lengths: no prepare/finalize, left_padding stays an array
        b.prefill([3] * b.batch, 64)
    else:
        b.prefill(random_lengths(rng, b.batch, 6), 64)
    state_forward(b, 1)
    a.extend(b)
    if seed % 3 == 0:
        a.extend(new_state(2, rng))  # rows not prefilled yet: zero-filled state
    elif seed % 3 == 1:
        fresh = new_state(2, rng)  # the side without arrays first
        fresh.extend(a)
        a = fresh
    for _ in range(2):
        state_forward(a, 1)
    rows = [a.extract(i) for i in range(a.batch)]
    merged = StatePair(layers.merge_rows([r[0] for r in rows]),
                       ArraysCache.merge([r[1] for r in rows]), rng)  # fmt: skip
    state_forward(merged, 1)


def test_cache_list_matches_mlx_lm():
    rng = np.random.default_rng(3)
    fresh = [CacheList(ArraysCache(2), KVCache()) for _ in range(3)]
    ours, theirs = layers.merge_rows(fresh), CacheList.merge(fresh)
    kv = Pair(ours[1], theirs[1], rng)
    st = StatePair(ours[0], theirs[0], rng)
    for c in (ours, theirs):
        c.prepare(lengths=[4, 2, 3], right_padding=[0, 2, 1])
    state_forward(st, 4)
    kv.forward(4)
    ours.finalize()
    theirs.finalize()
    kv.check("finalize")
    st.check("finalize")
    for c in (ours, theirs):
        c.filter([0, 2])
    kv.check("filter")
    st.check("filter")
    joiners = [CacheList(ArraysCache(2), KVCache())]
    for c, j in ((ours, layers.merge_rows(joiners)), (theirs, CacheList.merge(joiners))):
        c.extend(j)
    kv.check("extend")
    st.check("extend")
    row_ours, row_theirs = ours.extract(1), theirs.extract(1)
    for x, y in zip(row_ours.caches, row_theirs.caches):
        same_cache(x, y, "extract")


@pytest.mark.parametrize("adds_on_device", [True, False])  # the CPU backend's way, GPUs'
def test_decode_offsets_are_shared_by_every_layer_and_stay_exact(adds_on_device, monkeypatch):
    """``RowInts.shift``: the host only counts, every layer of a step ends up holding one
    device array, and host and device agree after any mix of reads, shifts and sets."""
    from batchlab.engine.caches import rowints

    monkeypatch.setattr(rowints, "_adds_offsets_on_device", lambda: adds_on_device)
    # equal ints in distinct arrays, one batch's layers (sharing one RowUploads)
    caches = layers.share_uploads([BatchKV([1, 0]) for _ in range(3)])
    for c in caches:
        _ = c.offset  # read, as RoPE does
    kv = mx.zeros((2, 1, 1, 4))
    for step in range(1, 4):
        for c in caches:
            c.update_and_fetch(kv, kv)
        assert len({id(c.offset) for c in caches}) == 1  # one array per step, shared
        for c in caches:
            assert c.offset.tolist() == [step - 1, step]
            assert c.offset_host.tolist() == [step - 1, step]
    caches[0].filter([1])  # a set mid-stream: that layer leaves the shared array
    assert caches[0].offset.tolist() == [3]
    caches[0].update_and_fetch(kv[:1], kv[:1])
    assert caches[0].offset_host.tolist() == [4] and caches[0].offset.tolist() == [4]
    with pytest.raises(AttributeError, match="assign BatchKV.offset, not offset_host"):
        caches[0].offset_host = np.array([0])


def test_padding_check_follows_every_set():
    c = BatchKV([0, 0])
    assert not c.left_padding_ints.any_nonzero()
    c.left_padding = [0, 2]
    assert c.left_padding_ints.any_nonzero()
    c.left_padding = c.left_padding_host - np.array([0, 2])
    assert not c.left_padding_ints.any_nonzero()


@pytest.mark.parametrize("drops", [True, False])  # the CPU backend's way, GPUs'
def test_decode_masks_are_the_masks_causal_mask_builds(drops: bool, monkeypatch):
    """``DecodeMasks``: each decode step's mask (a slice of a host mask kept per
    left-padding array) has causal_mask's bools, shape and dtype, across the 256-column
    widening, a filter, an extend, and a second cache with equal padding in between."""
    monkeypatch.setattr(BatchKV, "drops_all_true_decode_mask", staticmethod(lambda: drops))
    caches = [BatchKV([2, 0, 5]), BatchKV([2, 0, 5])]
    kv = mx.zeros((3, 1, 1, 2))
    seen = 0
    for step in range(262):
        if step == 120:
            for c in caches:
                c.filter([0, 2])  # trims the shared 2 columns: a new padding array
        if step == 200:
            for c in caches:
                c.extend(BatchKV.merge([kv_row(kv[:1, :, :1], kv[:1, :, :1])]))
        for c in caches:
            got = c.make_mask(1)
            want = causal_mask(1, c._idx, left_padding=c.left_padding_host)
            if got is None:
                assert drops and not np.any(c.left_padding_host)
                continue
            seen += 1
            assert got.dtype == mx.bool_ and got.shape == want.shape
            assert np.array_equal(np.array(got), np.array(want)), (step, c._idx)
        rows = len(caches[0].offset_host)
        for c in caches:
            c.update_and_fetch(kv[:rows], kv[:rows])
    assert caches[0]._idx > 256 and seen > 2 * 200


@pytest.mark.parametrize("drops", [True, False])
def test_ring_decode_masks_are_the_masks_ring_mask_builds(drops: bool, monkeypatch):
    """A ring's decode masks before it fills come from its ``DecodeMasks``; every step,
    through the 256-column widening, the fill and the wrap, they equal ``ring_mask``'s
    own build from the same state."""
    monkeypatch.setattr(BatchRing, "drops_all_true_decode_mask", staticmethod(lambda: drops))
    ring = BatchRing(300, [3, 0, 1])
    kv = mx.zeros((3, 1, 1, 2))
    ring.update_and_fetch(mx.zeros((3, 1, 4, 2)), mx.zeros((3, 1, 4, 2)))  # prefill
    masked = 0
    for step in range(310):
        got = ring.make_mask(1)
        want = ring_mask(1, max_size=ring.max_size, seen=ring._offset, idx=ring._idx,
                         rotated=ring.rotated, left_padding=ring.left_padding_host,
                         left_padding_max=int(ring.left_padding_host.max()),
                         all_true_as_none=drops)
        assert (got is None) == (want is None), step
        if got is not None:
            masked += 1
            assert got.dtype == want.dtype and got.shape == want.shape, step
            assert np.array_equal(np.array(got), np.array(want)), step
        ring.update_and_fetch(kv, kv)
    assert ring.rotated and masked >= 290


@pytest.mark.parametrize("seed", range(20))
def test_memoized_extremes_give_the_masks_numpy_gives(seed: int, monkeypatch):
    """The decode-path shortcuts (``RowInts.bounds`` after shifts and reads) return the
    masks the plain numpy functions build from the same host ints."""
    monkeypatch.setattr(BatchState, "drops_all_true_decode_mask", staticmethod(lambda: False))
    rng = np.random.default_rng(seed)
    B, N = int(rng.integers(1, 5)), int(rng.integers(1, 3))
    state = BatchState(2, left_padding=rng.integers(0, 3, B).tolist())
    state.lengths = rng.integers(0, 4, B).tolist() if seed % 2 else None
    for _ in range(int(rng.integers(0, 4))):
        state.advance(1)
        _ = state.left_padding_host if seed % 3 == 0 else None  # a read mid-way
    got = state.make_mask(N)
    want = ssm_mask(N, state.left_padding_host, state.lengths_host)
    assert np.array_equal(np.array(got), np.array(want)) and got.shape == want.shape

