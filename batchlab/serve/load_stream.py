"""One streamed completion, timed chunk by chunk, and the percentile both load sweeps
report (``load.py``, ``load_long.py``)."""

from __future__ import annotations

import time


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def _one(api, model: str, prompt: str, max_tokens: int, on_first=None):
    """(start, arrival time of each chunk that carries a choice, completion tokens);
    ``on_first()`` is called at the first such chunk."""
    start = time.perf_counter()
    stamps, tokens = [], None
    stream = await api.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                          stream=True, temperature=0.0,
                                          stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.choices:
            stamps.append(time.perf_counter())
            if on_first is not None and len(stamps) == 1:
                on_first()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return start, stamps, len(stamps) if tokens is None else tokens
