"""The prompt cache's rules, on hand-made single-row caches (no model): which entry a
prompt takes, how far it is trimmed, what each layer kind allows, and what is evicted."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache

from batchlab.engine.core.history import History
from batchlab.serve.prompt_cache import PromptCache

KV_BYTES_PER_TOKEN = 2 * 2 * 4  # keys + values, 2 floats each, float32


def kv(n: int) -> KVCache:
    c = KVCache()
    c.keys = mx.arange(2 * n, dtype=mx.float32).reshape(1, 1, n, 2)
    c.values = -c.keys
    c.offset = n
    return c


def ring(n: int, window: int) -> RotatingKVCache:
    """A ring that has seen ``n`` tokens (holding the last ``window``, temporal order)."""
    c = RotatingKVCache(max_size=window)
    held = min(n, window)
    c.keys = mx.ones((1, 1, held, 2))
    c.values = mx.ones((1, 1, held, 2))
    c.offset, c._idx = n, held
    return c


def ssm() -> ArraysCache:
    c = ArraysCache(2)
    c.cache = [mx.ones((1, 3)), mx.ones((1, 4))]
    return c


def entry(tokens, *layers) -> History:
    return History(caches=list(layers) or [kv(len(tokens))], tokens=tuple(tokens))


def test_the_longest_cached_prefix_wins_and_only_the_rest_is_left():
    cache = PromptCache()
    cache.insert(entry([1, 2]))
    cache.insert(entry([1, 2, 3, 4, 5]))  # drops [1, 2]: it serves that one by a trim
    cache.insert(entry([9, 9, 9]))
    assert len(cache) == 2
    hit = cache.fetch((1, 2, 3, 4, 5, 6, 7))
    assert hit.tokens == (1, 2, 3, 4, 5)
    assert hit.caches[0].offset == 5
    assert cache.stats().hits == 1 and cache.stats().cached_tokens == 5


def test_a_diverging_prompt_trims_a_full_attention_entry_and_leaves_it_whole():
    cache = PromptCache()
    cache.insert(entry([1, 2, 3, 4, 5, 6]))
    hit = cache.fetch((1, 2, 3, 9))
    assert hit.tokens == (1, 2, 3) and hit.caches[0].offset == 3
    again = cache.fetch((1, 2, 3, 4, 5, 6, 7))  # the entry itself was not trimmed
    assert again.tokens == (1, 2, 3, 4, 5, 6) and again.caches[0].offset == 6


def test_a_prompt_equal_to_an_entry_keeps_its_last_token_to_feed():
    cache = PromptCache()
    cache.insert(entry([1, 2, 3, 4]))
    assert cache.fetch((1, 2, 3, 4)).tokens == (1, 2, 3)
    assert cache.fetch((1, 2, 3)).tokens == (1, 2)  # a prompt shorter than the entry


def test_no_common_prefix_is_a_miss():
    cache = PromptCache()
    cache.insert(entry([1, 2, 3]))
    assert cache.fetch((5, 1, 2, 3)) is None
    assert cache.fetch((1,)) is None  # one token: it must be fed, nothing to reuse
    assert (cache.stats().hits, cache.stats().misses) == (0, 2)


@pytest.mark.parametrize("kind", ["ring-full", "ssm", "hybrid"])
def test_an_entry_that_cannot_rewind_serves_only_prompts_it_is_a_strict_prefix_of(kind):
    layers = {"ring-full": [ring(10, window=8)], "ssm": [ssm()],
              "hybrid": [kv(10), CacheList(kv(10), ssm())]}[kind]
    cache = PromptCache()
    cache.insert(entry([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], *layers))
    assert cache.fetch((0, 1, 2, 3, 7)) is None  # would need a trim
    assert cache.fetch(tuple(range(10))) is None  # equal: would need a trim of one
    assert cache.fetch(tuple(range(5))) is None  # shorter: would need a trim
    hit = cache.fetch(tuple(range(12)))
    assert hit.tokens == tuple(range(10))
    assert (cache.stats().hits, cache.stats().misses) == (1, 3)


def test_a_ring_that_has_not_filled_its_window_can_be_trimmed():
    cache = PromptCache()
    cache.insert(entry([1, 2, 3, 4, 5], ring(5, window=8)))
    hit = cache.fetch((1, 2, 3, 9))
    assert hit.tokens == (1, 2, 3)
    assert (hit.caches[0].offset, hit.caches[0]._idx) == (3, 3)


def test_an_entry_that_cannot_rewind_keeps_its_prefixes():
    cache = PromptCache()
    cache.insert(entry([1, 2, 3], ssm()))
    cache.insert(entry([1, 2, 3, 4, 5], ssm()))
    assert len(cache) == 2
    assert cache.fetch((1, 2, 3, 4, 9)).tokens == (1, 2, 3)  # the shorter state serves it


def test_the_least_recently_used_entry_goes_first_and_a_hit_refreshes():
    cache = PromptCache(max_entries=2)
    cache.insert(entry([1, 1]))
    cache.insert(entry([2, 2]))
    assert cache.fetch((1, 1, 5)) is not None  # [1, 1] is now the most recent
    cache.insert(entry([3, 3]))
    assert cache.fetch((2, 2, 5)) is None
    assert cache.fetch((1, 1, 5)) is not None and cache.fetch((3, 3, 5)) is not None


def test_the_byte_cap_evicts_and_refuses_what_cannot_fit_alone():
    cache = PromptCache(max_bytes=10 * KV_BYTES_PER_TOKEN)
    cache.insert(entry([1] * 4))
    cache.insert(entry([2] * 4))
    assert cache.stats().nbytes == 8 * KV_BYTES_PER_TOKEN
    cache.insert(entry([3] * 4))  # 12 tokens' worth: the oldest goes
    assert (len(cache), cache.stats().nbytes) == (2, 8 * KV_BYTES_PER_TOKEN)
    assert cache.fetch((1, 1, 1, 1, 5)) is None
    cache.insert(entry([4] * 11))  # over the cap alone: not kept, nothing evicted for it
    assert (len(cache), cache.stats().nbytes) == (2, 8 * KV_BYTES_PER_TOKEN)


def test_size_zero_turns_it_off():
    cache = PromptCache(max_entries=0)
    cache.insert(entry([1, 2, 3]))
    assert len(cache) == 0 and cache.fetch((1, 2, 3, 4)) is None
    assert cache.stats().misses == 0  # off: nothing is looked up
    with pytest.raises(ValueError, match="--prompt-cache-size"):
        PromptCache(max_entries=-1)
    with pytest.raises(ValueError, match="--prompt-cache-bytes"):
        PromptCache(max_bytes=0)


def test_prompt_cache_bytes_take_mlx_lms_sizes():
    from argparse import ArgumentTypeError

    from batchlab.serve.cli import parse_size

    assert [parse_size(t) for t in ("2e9", "500M", "2GB", "1.5G", "4096")] == \
        [2_000_000_000, 500_000_000, 2_000_000_000, 1_500_000_000, 4096]
    for bad in ("two", "5X", "0", "-1M"):
        with pytest.raises(ArgumentTypeError):
            parse_size(bad)
