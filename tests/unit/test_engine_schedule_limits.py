"""The scheduler's limits against BatchGenerator's, live, with small settings.

The default matrix never reaches ``prefill_batch_size``, ``completion_batch_size`` or
``prefill_step_size`` (B <= 8, prompts <= 26 tokens: docs/coverage.md, kind A): a mutant
of the admission cap survived it, and seeded bugs that drop a cap or the chunking pass
every default cell (docs/mutation.md, ``catalog.PENDING``). Here the
settings are shrunk so a few rows reach every limit, and the engine is compared with
mlx-lm's BatchGenerator run with the same settings in this process: equal tokens, equal
emitting steps and equal logprob bytes, every row. The exact emission steps are pinned
too, so a change of schedule that the oracle would share is still seen.
"""

import pytest

from batchlab.cells.cell import Cell, Event, Row
from batchlab.cells.scenarios import seeded_prompt
from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.scheduler import Scheduler
from batchlab.judging.compare import first_divergence
from batchlab.matrix.engine_run import run_script
from batchlab.oracle.batch import run_batch_oracle
from batchlab.zoo import load

CAPPED = ScheduleConfig(prefill_batch_size=2, completion_batch_size=3)
CHUNKED = ScheduleConfig(prefill_step_size=4)


def _cell(model: str, lengths: dict[str, int], events: list[tuple[int, str, str]],
          max_tokens: int = 5) -> Cell:
    rows = tuple(Row(name=n, prompt=seeded_prompt(n, k, 3), max_tokens=max_tokens)
                 for n, k in lengths.items())
    return Cell(model=model, path="l1", batch=len(rows), padding="ragged", script="limits",
                context="unit", rows=rows,
                events=tuple(Event(step=s, action=a, rows=tuple(r.split(",")))
                             for s, a, r in events))


def _both(cell: Cell, config: ScheduleConfig):
    loaded = load(cell.model)
    oracle = run_batch_oracle(cell, loaded.model, loaded.dtype, config)
    engine = run_script(cell, loaded.model, loaded.dtype, config, keep_values=False)
    return oracle, engine


def _first_steps(trajectory) -> dict[str, int]:
    return {name: steps[0].step for name, steps in trajectory.rows.items()}


FIVE_AT_ONCE = {"A": 5, "B": 1, "C": 3, "D": 7, "E": 2}


@pytest.mark.parametrize("model", ["llama", "gemma3", "qwen3.5"])
def test_capped_admission_equals_batch_generator(model):
    """5 rows at once, 2 admitted per step, at most 3 decoding: the queue drains as rows
    finish, and each row starts exactly when BatchGenerator starts it."""
    cell = _cell(model, FIVE_AT_ONCE, [(0, "insert", "A,B,C,D,E")], max_tokens=4)
    oracle, engine = _both(cell, CAPPED)
    assert first_divergence(oracle, engine, list(FIVE_AT_ONCE)) is None
    # A token is emitted one step after the forward that sampled it. Step 0 admits A,B
    # (B, one token, joins at once) and prefills A; steps 1 and 2 admit one row each (the
    # prompt batch holds 2); at step 3 three rows decode, so the step stops there and D
    # waits in the prompt batch; B leaves at step 4 and D joins; A leaves at 5, E joins.
    assert _first_steps(engine) == {"A": 2, "B": 1, "C": 3, "D": 5, "E": 6}
    assert all(len(engine.rows[n]) == 4 for n in FIVE_AT_ONCE)


def test_capped_admission_with_rows_arriving_and_leaving():
    cell = _cell("llama", FIVE_AT_ONCE, [(0, "insert", "A,B,C"), (1, "insert", "D,E"),
                                         (2, "remove", "B")], max_tokens=4)
    oracle, engine = _both(cell, CAPPED)
    assert first_divergence(oracle, engine, list(FIVE_AT_ONCE)) is None
    assert [s.step for s in engine.rows["B"]] == [1]  # removed before step 2


@pytest.mark.parametrize("model", ["llama", "gemma3", "qwen3.5"])
def test_chunked_prefill_equals_batch_generator(model):
    """Prompts of 11, 3 and 6 tokens with 4-token chunks: A's prefill (10 tokens: the
    last one is fed by its first decode step) takes steps 0-2, C enters the prompt batch
    at step 1 while A is mid-prompt, A joins at step 3 and emits from step 4. On gemma3
    (window 8) the ring's second chunk is cut to its newest keys before it is appended."""
    lengths = {"A": 11, "B": 3, "C": 6}
    cell = _cell(model, lengths, [(0, "insert", "A,B"), (1, "insert", "C")])
    oracle, engine = _both(cell, CHUNKED)
    assert first_divergence(oracle, engine, list(lengths)) is None
    assert _first_steps(engine) == _first_steps(oracle)
    assert _first_steps(engine)["A"] == 4


def test_completion_cap_is_raised_to_the_prefill_batch_size():
    """As BatchGenerator: completion_batch_size below prefill_batch_size is raised."""
    scheduler = Scheduler(load("llama").model, ScheduleConfig(prefill_batch_size=4,
                                                              completion_batch_size=2))
    assert scheduler.max_decoding == 4


def test_admission_counts_step_by_step():
    """The queue, prompt batch and decode batch sizes after each step, with 2 admitted
    per step and 3 decoding at most (rows of 3 tokens, 2 to generate)."""
    scheduler = Scheduler(load("llama").model, CAPPED)
    scheduler.insert([Request(name=n, prompt=seeded_prompt(n, 3, 0), max_tokens=2)
                      for n in "ABCDE"])
    sizes = []
    for _ in range(8):
        emitted = scheduler.step()
        sizes.append((len(scheduler.queue), len(scheduler.prompt), len(scheduler.decode),
                      "".join(e.name for e in emitted)))
    assert sizes == [
        (3, 2, 0, ""),     # 0: A,B admitted (the prompt batch holds 2) and prefilled
        (3, 0, 2, ""),     # 1: the prompt batch is full until A,B join (solo first step)
        (2, 1, 2, "AB"),   # 2: A,B emit; one decoding slot is left: C admitted
        (1, 1, 1, "AB"),   # 3: A,B finish (2 tokens); C joins; D admitted
        (0, 1, 2, "C"),    # 4: E admitted, D joins
        (0, 0, 2, "CD"),   # 5: C finishes, E joins
        (0, 0, 1, "DE"),
        (0, 0, 0, "E"),
    ]


def test_a_second_padded_chunk_after_finalize_on_a_state_model():
    """Three prompts (14, 10, 7 tokens) in 4-token chunks on qwen3.5: the second chunk
    is padded (C ends), its finalize drops the state's left padding, and the third chunk
    is padded again with only ``lengths`` tracked (the SSM mask's lengths-only case)."""
    lengths = {"A": 14, "B": 10, "C": 7}
    cell = _cell("qwen3.5", lengths, [(0, "insert", "A,B,C")])
    oracle, engine = _both(cell, CHUNKED)
    assert first_divergence(oracle, engine, list(lengths)) is None
    assert _first_steps(engine) == {"A": 5, "B": 4, "C": 3}


def test_admission_with_free_prompt_slots_but_one_decoding_slot_equals_batch_generator():
    """The counts scenario above against BatchGenerator: at step 2 the prompt batch has
    two free slots but only one row may still start decoding, so only C is admitted."""
    cell = _cell("llama", dict.fromkeys("ABCDE", 3), [(0, "insert", "A,B,C,D,E")], max_tokens=2)
    oracle, engine = _both(cell, CAPPED)
    assert first_divergence(oracle, engine, list("ABCDE")) is None
    assert _first_steps(engine) == {"A": 2, "B": 2, "C": 4, "D": 5, "E": 6}
