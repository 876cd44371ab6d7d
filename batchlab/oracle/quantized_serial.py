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
"""

from __future__ import annotations

import mlx.core as mx
from mlx import nn
from mlx_lm.generate import generate_step, generation_stream
from mlx_lm.models.cache import CacheList, KVCache, RotatingKVCache, make_prompt_cache
from mlx_lm.sample_utils import greedy_sampler

from batchlab.cells.cell import Cell
from batchlab.engine.core.layers import has_rings
from batchlab.engine.paths.quantized.kv import KVQuant
from batchlab.oracle.batch import run_batch_oracle
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
        if row.prefix or row.resume or row.processors or row.sampling:
            raise ValueError(f"row {row.name}: the quantized oracle runs plain greedy rows "
                             "only (no history, park / resume, processors or samplers)")
    if not cell.sampling.greedy:
        raise ValueError("the quantized oracle runs greedy cells only")


def run_quantized_oracle(cell: Cell, model: nn.Module, dtype: str, plan: list[KVQuant],
                         keep_values: bool = False) -> Trajectory:
    check_cell(cell)
    schedule = run_batch_oracle(cell, model, dtype)
    uniform = len(set(plan)) == 1 and not has_rings(model)
    rows = {}
    for row in cell.rows:
        steps = schedule.rows.get(row.name, ())
        if not steps:
            rows[row.name] = ()
            continue
        ps = cell.schedule.prefill_step_size
        run = (mlx_lm_steps(model, row.prompt, len(steps), plan[0], ps) if uniform
               else serial_quantized_steps(model, row.prompt, len(steps), plan, ps))
        rows[row.name] = tuple(make_step(s.step, token, logprobs, keep_values)
                               for s, (token, logprobs) in zip(steps, run, strict=True))
    return Trajectory(rows=rows, dtype=dtype)
