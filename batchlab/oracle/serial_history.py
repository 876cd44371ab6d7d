"""The serial self-check for rows with history or processors: one row, B=1, same chunks.

A row that joined with a prefix cache, or was parked and resumed, or runs logits
processors, is replayed alone on mlx-lm's single-row caches (``make_prompt_cache``) with
mlx-lm's own ``make_logits_processors``, through the same forwards the batch gave it:

    prefix (one chunk per prefill_step_size) | prompt[:-1] (same) | decode one id at a time
    | after a park: resume[:-1] | decode ...

Greedy only (a draw at temperature > 0 depends on the batch). On the CPU backend, for
models without sliding windows, every row of a batch equals its B=1 run when the
forwards are chunked alike (FACTS.md); the chunks matter for state-space scans, which is
why the replay keeps the batch's boundaries instead of one forward over all the ids. A
difference is evidence that the oracle is wrong: ORACLE-BUG.
"""

from __future__ import annotations

import mlx.core as mx
from mlx import nn
from mlx_lm.models.cache import make_prompt_cache

from batchlab.cells.cell import Cell, Row
from batchlab.oracle.processors import mlx_lm_processors
from batchlab.trajectory import Step, make_step


def needs_history_replay(row: Row) -> bool:
    return bool(row.prefix or row.resume or row.processors)


def row_is_greedy(cell: Cell, row: Row) -> bool:
    return (row.sampling or cell.sampling).greedy


def segment_lengths(cell: Cell, row: Row, steps: tuple[Step, ...]) -> list[int]:
    """How many tokens the batch emitted for the row before its park (or its continue),
    and after."""
    park = [e.step for e in cell.events
            if e.action in ("park", "continue") and row.name in e.rows]
    if not park:
        return [len(steps)]
    before = sum(1 for s in steps if s.step < park[0])
    return [before, len(steps) - before]


def replay_row(model: nn.Module, cell: Cell, row: Row, lengths: list[int]) -> list[Step]:
    """The row's emitted (token, logprobs) steps on the serial path, ``lengths[i]`` tokens
    for prompt segment i (the prompt, then the resume ids)."""
    size = cell.schedule.prefill_step_size
    cache = make_prompt_cache(model)
    processors = (mlx_lm_processors(row.processors)
                  if row.processors else [])
    context: list[int] = []

    def prefill(ids):
        tokens = mx.array([list(ids)])
        while tokens.shape[1] > 0:
            model(tokens[:, :size], cache=cache)
            mx.eval([c.state for c in cache])
            tokens = tokens[:, size:]
        context.extend(ids)

    if row.prefix:
        prefill(row.prefix)
    out: list[Step] = []
    segments = list(zip((row.prompt, row.resume), lengths))
    for i, (segment, n) in enumerate(segments):
        if len(segment) > 1:
            prefill(segment[:-1])
        fed = segment[-1]
        for _ in range(n):
            logits = model(mx.array([[fed]]), cache=cache)[:, -1, :]
            context.append(fed)
            for processor in processors:
                logits = processor(mx.array(context, dtype=mx.int32), logits)
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            fed = mx.argmax(logprobs, axis=-1).item()
            out.append(make_step(len(out), fed, logprobs[0], keep_values=False))
        if i + 1 < len(segments):  # the batch fed its last emitted token before the park
            # (and before a finish: BatchGenerator's finished caches hold it too)
            model(mx.array([[fed]]), cache=cache)
            context.append(fed)
    return out
