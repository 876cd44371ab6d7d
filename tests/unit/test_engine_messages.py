"""The engine's refusals say what is wrong and what to do, word for word.

No matrix cell can make these errors (the scheduler keeps the caches' call order, and
matrix validation refuses unknown paths first), so the messages are held here, each
whole: mutation rounds 5-6 found that the existing tests matched only a prefix, so a
message garbled past it (``XX...XX``, upper-cased, ``None``) passed them.
"""

from __future__ import annotations

import re

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import RotatingKVCache

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.caches.ring import BatchRing
from batchlab.engine.caches.window import WindowKV
from batchlab.engine.core.layers import refuse_unbatchable
from batchlab.engine.paths.paged.block_manager import BlockManager, OutOfBlocks
from batchlab.engine.paths.paged.table import BlockTable
from batchlab.engine.paths.registry import PATHS, Unsupported, resolve_path


def exactly(text: str) -> str:
    return "^" + re.escape(text) + "$"


def test_extending_before_finalize_is_refused():
    kv = BatchKV([0, 0])
    kv.prepare(lengths=[2, 1], right_padding=[0, 1])
    with pytest.raises(ValueError, match=exactly("finalize() both caches before extend()")):
        kv.extend(BatchKV([0]))


def test_a_ring_decoding_before_finalize_is_refused():
    ring = BatchRing(4, [0, 0])
    k = mx.zeros((2, 1, 2, 2))
    ring.prepare(lengths=[2, 1], right_padding=[0, 1])
    ring.update_and_fetch(k, k)
    with pytest.raises(RuntimeError, match=exactly(
            "finalize() should be called before decoding with BatchRing")):
        ring.update_and_fetch(k[:, :, :1], k[:, :, :1])


def test_rings_of_two_windows_do_not_merge():
    rows = [RotatingKVCache(max_size=4), RotatingKVCache(max_size=8)]
    with pytest.raises(ValueError, match=exactly(
            "BatchRing can only merge caches with the same max_size")):
        BatchRing.merge(rows)


def test_host_ints_are_assigned_through_the_attribute():
    kv = BatchKV([0])
    with pytest.raises(AttributeError, match=exactly(
            "assign BatchKV.offset, not offset_host: the device copy would go stale")):
        kv.offset_host = np.array([1])


def test_the_invariant_window_refuses_history():
    with pytest.raises(ValueError, match=exactly(
            "the invariant path does not take rows with history yet (WindowKV has no "
            "merge); run them on the l1 path")):
        WindowKV.merge([])


def test_a_full_fixed_pool_says_what_to_do():
    m = BlockManager(block_size=2, num_blocks=1)
    m.append(BlockTable(), [None] * 2)
    with pytest.raises(OutOfBlocks, match=exactly(
            "all 1 KV blocks are in use; admit fewer rows or give the pool more blocks")):
        m.append(BlockTable(), [None])


def test_an_unknown_path_names_the_known_ones():
    known = ", ".join(PATHS)
    with pytest.raises(Unsupported, match=exactly(f"unknown path 'nope'; known: {known}")) as e:
        resolve_path("nope")
    assert e.value.reason == f"the engine has no path 'nope' (known: {known})"


def test_a_model_that_needs_mlx_lm_cache_classes_is_refused():
    model = type("Model", (), {"__module__": "mlx_lm.models.mamba"})()
    with pytest.raises(ValueError, match=exactly(
            "mlx_lm.models.mamba checks isinstance(cache, ArraysCache) and would keep no "
            "state in the engine's caches; it is not supported")):
        refuse_unbatchable(model)
