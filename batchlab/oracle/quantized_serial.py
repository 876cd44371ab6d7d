"""The oracle of a quantized-KV row: mlx-lm's serial ``QuantizedKVCache`` run, row by row.

mlx-lm cannot batch a quantized cache (``BatchKVCache.to_quantized`` raises), so the
reference for a row of a quantized batch is that row alone through mlx-lm's single-stream
quantization: ``generate_step(..., kv_bits, kv_group_size, quantized_kv_start)``, greedy.

- Which steps emit a row's tokens (its schedule) comes from mlx-lm's BatchGenerator run
  of the same script in the model dtype: without stop tokens the schedule does not
  depend on the tokens, so the serial row is asked for exactly as many tokens.
- A uniform scheme on a model of full-attention layers runs ``generate_step`` itself.
  A mixed scheme (per-layer bits) or a model with sliding-window layers runs
  ``serial_quantized_steps``: generate_step's loop with ``maybe_quantize_kv_cache``
  applied per layer, where a sliding-window layer stays in the model dtype because
  mlx-lm cannot quantize it (``RotatingKVCache.to_quantized`` raises "NYI"). Those
  cells are gated by KL (the engine's rings are quantized).
- A row with history (a prefix, a park and resume, a finished row continued) is replayed
  alone (``replay_quantized_row``) through the forwards the batch gave it, as
  ``serial_history.replay_row`` replays an l1 row, with mlx-lm's quantization rule
  applied after each forward (``maybe_quantize_kv_cache``: a ``KVCache`` whose offset
  has reached the start becomes ``to_quantized``'s ``QuantizedKVCache``). A prefix is a
  cached prompt built in the model dtype by the single-stream path (``prefill_step_size``
  chunks) and quantized as it is handed over (``to_quantized``, before the row's first
  own forward), which is what a server's prompt cache holds once a kv-bits run has
  touched it; a parked row keeps its (by then quantized) caches and resumes on them; a
  row parked while still queued held nothing (BatchGenerator hands back empty caches)
  and resumes afresh on its resume ids.
"""


from __future__ import annotations

import mlx.core as mx
from mlx import nn
from mlx_lm.generate import generate_step, generation_stream
from mlx_lm.models.cache import CacheList, KVCache, RotatingKVCache, make_prompt_cache
from mlx_lm.sample_utils import greedy_sampler

from batchlab.cells.cell import Cell, Row
from batchlab.engine.core.layers import has_rings
from batchlab.engine.paths.quantized.kv import KVQuant
from batchlab.oracle.batch import run_batch_oracle
from batchlab.oracle.serial_history import segment_lengths
from batchlab.trajectory import Trajectory, make_step

QUANTIZED_ORACLE_NAME = "mlx_lm.generate.generate_step(kv_bits) per row"


def _quantize_layers(caches: list, plan: list[KVQuant]) -> None:
    """``maybe_quantize_kv_cache`` with one KVQuant per attention cache (plan order)."""
    index = 0

    def visit(holder, key, c):
        nonlocal index
        if isinstance(c, CacheList):
            parts = list(c.caches)
            for j, part in enumerate(parts):
                visit(parts, j, part)
            c.caches = tuple(parts)
            return
        if type(c) not in (KVCache, RotatingKVCache) and not hasattr(c, "bits"):
            return
        q = plan[index]
        index += 1
        if type(c) is KVCache and c.offset >= q.start:
            holder[key] = c.to_quantized(group_size=q.group_size, bits=q.bits)

    for e, c in enumerate(caches):
        visit(caches, e, c)


def serial_quantized_steps(model: nn.Module, prompt: tuple[int, ...], n: int,
                           plan: list[KVQuant], prefill_step_size: int):
    """generate_step's greedy loop with per-layer quantization; [(token, logprobs)]."""
    caches = make_prompt_cache(model)
    ids = mx.array(prompt)
    out = []
    with mx.stream(generation_stream):
        while len(ids) > 1:
            k = min(prefill_step_size, len(ids) - 1)
            model(ids[:k][None], cache=caches)
            _quantize_layers(caches, plan)
            mx.eval([c.state for c in caches])
            ids = ids[k:]
            mx.clear_cache()
        y = ids
        for _ in range(n):
            logits = model(y[None], cache=caches)[:, -1, :]
            _quantize_layers(caches, plan)
            logprobs = logits - mx.logsumexp(logits, keepdims=True)
            y = greedy_sampler(logprobs)
            mx.eval(y, logprobs)
            out.append((y.item(), logprobs.squeeze(0)))
    return out


def mlx_lm_steps(model: nn.Module, prompt: tuple[int, ...], n: int, q: KVQuant,
                 prefill_step_size: int):
    """mlx-lm's own generate_step at one bits / group size / start; [(token, logprobs)]."""
    return list(generate_step(mx.array(prompt), model, max_tokens=n, sampler=greedy_sampler,
                              prefill_step_size=prefill_step_size, kv_bits=q.bits,
                              kv_group_size=q.group_size, quantized_kv_start=q.start))


def check_cell(cell: Cell) -> None:
    for row in cell.rows:
        if row.processors or row.sampling:
            raise ValueError(f"row {row.name}: the quantized oracle runs greedy rows without "
                             "processors or samplers of their own (history is fine)")
    if not cell.sampling.greedy:
        raise ValueError("the quantized oracle runs greedy cells only")


def replay_quantized_row(model: nn.Module, cell: Cell, row: Row, lengths: list[int],
                         plan: list[KVQuant], queued_park: bool = False,
                         ) -> list[tuple[int, mx.array]]:
    """A row with history alone: prefix (model dtype, then quantized) | prompt[:-1] |
    one id at a time | after a park or finish: resume[:-1] | one id at a time, with
    ``lengths[i]`` tokens emitted for segment i and mlx-lm's quantization rule after
    every forward; [(token, logprobs)]. ``queued_park``: the row was parked while still
    queued (its caches held nothing), so it starts afresh on its resume ids."""
    size = cell.schedule.prefill_step_size
    caches = make_prompt_cache(model)

    def forward(ids: tuple[int, ...], quantize: bool = True) -> mx.array:
        logits = model(mx.array([list(ids)]), cache=caches)
        if quantize:
            _quantize_layers(caches, plan)
        return logits

    def prefill(ids: tuple[int, ...], quantize: bool = True) -> None:
        for at in range(0, len(ids), size):
            forward(ids[at:at + size], quantize)
            mx.eval([c.state for c in caches])

    out: list[tuple[int, mx.array]] = []
    with mx.stream(generation_stream):
        if row.prefix:
            prefill(row.prefix, quantize=False)  # the cached prompt, in the model dtype
            _quantize_layers(caches, plan)  # ... quantized as the row takes it
        segments = list(zip((row.prompt, row.resume), lengths))[1 if queued_park else 0:]
        for i, (segment, n) in enumerate(segments):
            if i and n == 0:
                continue
            prefill(segment[:-1])
            fed = segment[-1]
            for _ in range(n):
                logits = forward((fed,))[:, -1, :]
                logprobs = logits - mx.logsumexp(logits, keepdims=True)
                y = greedy_sampler(logprobs)
                mx.eval(y, logprobs)
                fed = y.item()
                out.append((fed, logprobs.squeeze(0)))
            if i + 1 < len(segments):  # the batch fed the last emitted token before the
                forward((fed,))         # park (or the finish): the kept cache holds it
    return out


def run_quantized_oracle(cell: Cell, model: nn.Module, dtype: str, plan: list[KVQuant],
                         keep_values: bool = False) -> Trajectory:
    check_cell(cell)
    held: dict[str, int] = {}  # ids each parked row's caches held (BatchGenerator's)
    schedule = run_batch_oracle(cell, model, dtype, held=held)
    uniform = len(set(plan)) == 1 and not has_rings(model)
    rows = {}
    for row in cell.rows:
        steps = schedule.rows.get(row.name, ())
        if not steps:
            rows[row.name] = ()
            continue
        ps = cell.schedule.prefill_step_size
        if row.prefix or row.resume:
            lengths = segment_lengths(cell, row, steps)
            queued = len(lengths) > 1 and lengths[0] == 0 and held.get(row.name) == 0
            if len(lengths) > 1 and lengths[0] == 0 and not queued:
                raise ValueError(f"row {row.name} is parked before its first token (its caches "
                                 "hold part of a prompt): the quantized oracle cannot replay "
                                 "that; park it after it emitted, or while it is queued")
            run = replay_quantized_row(model, cell, row, lengths, plan, queued_park=queued)
        elif uniform:
            run = mlx_lm_steps(model, row.prompt, len(steps), plan[0], ps)
        else:
            run = serial_quantized_steps(model, row.prompt, len(steps), plan, ps)
        rows[row.name] = tuple(make_step(s.step, token, logprobs, keep_values)
                               for s, (token, logprobs) in zip(steps, run, strict=True))
    return Trajectory(rows=rows, dtype=dtype)
