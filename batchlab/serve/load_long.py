"""``batchlab load --long-prompt N``: short streams' inter-token latency beside one long prompt.

    batchlab load --target batchlab=http://127.0.0.1:8000 --model llama \
        --concurrency 4 --long-prompt 9000 --prompt-len 32:8 --output-len 64:16

At each concurrency level C, C short streamed completions run in a closed loop (a
finished one makes room for the next, lengths drawn as the sweep draws them). Once every
one of the first C has its first token, one request with a prompt of N token ids (sent as
ids, so its length is exact on any tokenizer; ``max_tokens`` 1) goes in. The window is
from that send to its answer. Reported: the gaps between the short streams' chunks that
fall in the window (p50, p99, max: what a running row waited while the long prompt was
admitted), the same gaps outside it, the long request's time to answer, and the short
streams' output tok/s inside the window. Without chunked prefill a running row's gap
spans the whole long prefill; with it, one chunk.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from batchlab.serve.load_stream import _one, _pct


@dataclass(frozen=True, slots=True, kw_only=True)
class LongPromptResult:
    target: str
    concurrency: int
    long_prompt_tokens: int
    long_seconds: float  # the long request's send to its answer
    long_status: str  # "ok", or the error's class name
    short_requests: int
    short_errors: int
    error_kinds: dict[str, int]  # exception class -> count
    window_gaps: int  # short-stream gaps that ended inside the window
    itl_p50_ms: float  # of those gaps
    itl_p99_ms: float
    itl_max_ms: float
    outside_itl_p50_ms: float  # the gaps before and after the window
    outside_itl_p99_ms: float
    window_tokens_per_s: float  # short streams' chunks inside the window


def long_ids(n: int, salt: int = 0) -> list[int]:
    """A prompt of ``n`` ids inside any vocabulary of at least 256 (the zoo's byte ids);
    each ``salt`` starts with another id, so no level hits the previous one's prompt cache."""
    return [3 + (7 * i + salt) % 250 for i in range(n)]


async def run_long_level(target: str, url: str, model: str, concurrency: int,
                         prompts: list[str], outputs: list[int],
                         long_tokens: int, salt: int = 0) -> LongPromptResult:
    from openai import AsyncOpenAI

    api = AsyncOpenAI(base_url=url.rstrip("/") + "/v1", api_key="none", max_retries=0,
                      timeout=1800)
    started = asyncio.Event()
    first_tokens: set[int] = set()
    window: dict[str, float] = {}
    gaps: list[tuple[float, float]] = []  # (end time, gap)
    counts = {"requests": 0, "errors": 0}
    kinds: dict[str, int] = {}

    async def short_worker(k: int) -> None:
        i = k
        while "end" not in window:
            prompt, n = prompts[i % len(prompts)], outputs[i % len(outputs)]
            i += concurrency
            counts["requests"] += 1
            try:
                _, stamps, _ = await _one(api, model, prompt, n, on_first=lambda: (
                    first_tokens.add(k), len(first_tokens) == concurrency and started.set()))
            except Exception as err:  # noqa: BLE001 - counted; the loop goes on
                counts["errors"] += 1
                kinds[type(err).__name__] = kinds.get(type(err).__name__, 0) + 1
                continue
            gaps.extend((b, b - a) for a, b in zip(stamps, stamps[1:]))

    async def long_request() -> str:
        await started.wait()
        window["start"] = time.perf_counter()
        try:
            await api.completions.create(model=model, prompt=long_ids(long_tokens, salt),
                                         max_tokens=1, temperature=0.0)
            status = "ok"
        except Exception as err:  # noqa: BLE001 - a refusal is a result too
            status = type(err).__name__
        window["end"] = time.perf_counter()
        return status

    workers = [asyncio.create_task(short_worker(k)) for k in range(concurrency)]
    status = await long_request()
    await asyncio.gather(*workers)
    await api.close()
    start, end = window["start"], window["end"]
    inside = [g for t, g in gaps if start < t <= end]
    outside = [g for t, g in gaps if not start < t <= end]
    return LongPromptResult(
        target=target, concurrency=concurrency, long_prompt_tokens=long_tokens,
        long_seconds=round(end - start, 3), long_status=status,
        short_requests=counts["requests"], short_errors=counts["errors"], error_kinds=kinds,
        window_gaps=len(inside), itl_p50_ms=round(_pct(inside, 0.5), 1),
        itl_p99_ms=round(_pct(inside, 0.99), 1),
        itl_max_ms=round(max(inside) * 1000, 1) if inside else float("nan"),
        outside_itl_p50_ms=round(_pct(outside, 0.5), 2),
        outside_itl_p99_ms=round(_pct(outside, 0.99), 2),
        window_tokens_per_s=round(len(inside) / max(end - start, 1e-9), 1))


COLUMNS = ("target", "C", "long prompt", "long s", "gaps in window", "ITL p50 ms",
           "ITL p99 ms", "ITL max ms", "outside p50 ms", "outside p99 ms", "short tok/s",
           "errors")


def markdown(results: list[LongPromptResult]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in results]
    return "\n".join(lines) + "\n"


def row(r: LongPromptResult) -> list[str]:
    return [r.target, str(r.concurrency), f"{r.long_prompt_tokens} ({r.long_status})",
            f"{r.long_seconds:g}", str(r.window_gaps), f"{r.itl_p50_ms:g}",
            f"{r.itl_p99_ms:g}", f"{r.itl_max_ms:g}", f"{r.outside_itl_p50_ms:g}",
            f"{r.outside_itl_p99_ms:g}", f"{r.window_tokens_per_s:g}", str(r.short_errors)]
