"""The prompt cache per layer kind, through the serve engine (no HTTP): a sliding-window
ring is trimmed only while it holds fewer tokens than its window, an SSM state never,
and a state that is reused continues exactly where the first request left it."""

from __future__ import annotations

import queue

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache

from batchlab.engine.core.sampler import GREEDY
from batchlab.serve.engine_thread import Done, ServeEngine
from batchlab.zoo import load
from batchlab.zoo.load import vocab_size

PROMPT = (3, 14, 15, 92, 65, 35, 89, 79)  # 8 ids: with 6 emitted, past gemma3's window 8


class Pair:
    """An engine with the prompt cache and one without, on the same model."""

    def __init__(self, name: str):
        self.model = load(name).model
        self.cached, self.fresh = (
            ServeEngine(self.model, vocab_size=vocab_size(self.model), max_batch=2,
                        prompt_cache_size=size).start() for size in (10, 0))

    def run(self, engine: ServeEngine, prompt, max_tokens: int = 6):
        """(token, its logprob) per emitted token."""
        events = queue.Queue()
        engine.submit({"prompt": list(prompt), "max_tokens": max_tokens, "sampling": GREEDY,
                       "logprobs": 0, "stop_ids": frozenset()}, events.put)
        out = []
        while not isinstance(event := events.get(timeout=120), Done):
            out.append((event.id, event.logprob))
        assert event.reason == "length", event
        return out

    def both(self, prompt, max_tokens: int = 6):
        """The cached engine's answer, the fresh one's, and the cached tokens it reused."""
        before = self.cached.stats().cached_prompt_tokens
        hit = self.run(self.cached, prompt, max_tokens)
        reused = self.cached.stats().cached_prompt_tokens - before
        return hit, self.run(self.fresh, prompt, max_tokens), reused

    def close(self):
        self.cached.close()
        self.fresh.close()


@pytest.fixture(scope="module")
def gemma3():
    pair = Pair("gemma3")
    yield pair
    pair.close()


def test_a_ring_within_its_window_is_trimmed(gemma3):
    short = (5, 6, 7)
    first = gemma3.run(gemma3.cached, short, 3)  # 6 ids held, window 8: not yet full
    other = next(t for t in (9, 10, 11) if t != first[0][0])
    hit, fresh, reused = gemma3.both((*short, other, 9))
    assert reused == 3
    assert hit == fresh  # B=1, no padding: the same keys in the same order (CPU)


def test_a_ring_past_its_window_serves_only_longer_prompts(gemma3):
    emitted = [t for t, _ in gemma3.run(gemma3.cached, PROMPT)]  # 14 ids held: wrapped
    for prompt in ((*PROMPT[:5], 7, 7, 7), PROMPT):  # each would need a trim
        hit, fresh, reused = gemma3.both(prompt)
        assert (reused, hit) == (0, fresh)
    hit, fresh, reused = gemma3.both((*PROMPT, *emitted, 26, 53, 58))
    assert reused == len(PROMPT) + 6
    assert hit == fresh  # B=1 (CPU): the ring's 8 keys, unrolled, equal the fresh ring's


def _replay(model, segments: list[tuple[int, ...]], lengths: list[int]):
    """mlx-lm's single-stream caches through the forwards the server ran: per segment,
    its ids but the last in one forward, then one id at a time (the last, then each
    emitted id, the last emitted included), ``lengths[i]`` tokens emitted after segment
    i. (token, logprob) each."""
    cache = make_prompt_cache(model)
    out = []
    for ids, n in zip(segments, lengths):
        if len(ids) > 1:
            model(mx.array([list(ids[:-1])]), cache=cache)
        fed = ids[-1]
        for _ in range(n):
            logits = model(mx.array([[fed]]), cache=cache)[:, -1, :]
            logprobs = (logits - mx.logsumexp(logits, axis=-1, keepdims=True))[0]
            fed = mx.argmax(logprobs).item()
            out.append((fed, logprobs.astype(mx.float32)[fed].item()))
        model(mx.array([[fed]]), cache=cache)  # the forward that emitted it fed it too
    return out


@pytest.mark.parametrize("name", ["mamba2", "qwen3.5"])
def test_an_ssm_state_is_reused_only_whole_and_continues_exactly(name):
    pair = Pair(name)
    try:
        first = pair.run(pair.cached, PROMPT)
        emitted = tuple(t for t, _ in first)
        for prompt in ((*PROMPT[:5], 7, 7, 7), PROMPT, (*PROMPT, *emitted)):
            hit, fresh, reused = pair.both(prompt)  # each would need a trim
            assert (reused, hit) == (0, fresh)
        # the first request's entry, and the three above's; the longest strict prefix wins
        longer = (*PROMPT, *emitted, 26, 53, 58)
        hit, fresh, reused = pair.both(longer)
        assert reused == len(PROMPT) + 6
        assert [t for t, _ in hit] == [t for t, _ in fresh]
        # the reused state is the first request's, continued: mlx-lm's own caches through
        # the same forwards give every token and logprob (a fresh prefill of all 17 ids
        # scans them in one chunk, which may round differently)
        assert _replay(pair.model, [PROMPT, (26, 53, 58)], [6, 6]) == first + hit
    finally:
        pair.close()
