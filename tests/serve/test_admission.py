"""KV-budget admission's projection (batchlab/serve/admission.py), with exact values."""

from __future__ import annotations

from batchlab.engine.core.cost import RowCost
from batchlab.engine.core.sampler import GREEDY
from batchlab.serve.admission import admissible, projected_bytes
from batchlab.serve.job import Job

# one full-attention layer (256 bytes a token) and one ring of 512 columns (128 a token)
COST = RowCost(per_token=256, window_per_token=((512, 128),), fixed=0)


def job(name: str, prompt: int, max_tokens: int, done: int = 0) -> Job:
    return Job(name=name, prompt=(1,) * prompt, max_tokens=max_tokens, sampling=GREEDY,
               stop_ids=frozenset(), sink=lambda event: None, num_tokens=done)


def test_a_lone_row_costs_its_prompt_and_max_tokens():
    assert projected_bytes(COST, [job("A", 100, 10)]) == 110 * 256 + 110 * 128
    assert projected_bytes(COST, []) == 0


def test_the_ring_keeps_the_widest_prompt_for_the_longest_running_row():
    # A: 100 + 10, B: 10 + 200. The full-attention layer trims B's padding once A leaves
    # (210 columns at most), but the ring grows one column a step from A's 100 and never
    # narrows: 300 columns when B ends. From the lengths alone it would be 210.
    a, b = job("A", 100, 10), job("B", 10, 200)
    assert projected_bytes(COST, [a, b]) == 2 * (210 * 256 + 300 * 128)
    # capped at the window
    assert projected_bytes(COST, [a, job("B", 10, 600)]) == 2 * (610 * 256 + 512 * 128)


def test_running_rows_count_the_ring_as_it_is_and_their_steps_left():
    # the decode batch's ring already holds 120 columns (a row that left was wider)
    a = job("A", 20, 50, done=30)  # 20 steps left
    assert projected_bytes(COST, [a], ring_now=120) == 70 * 256 + 140 * 128


def test_admission_refuses_the_row_the_ring_would_not_fit():
    a, b = job("A", 100, 10), job("B", 10, 200)
    lengths_only = 2 * (210 * 256 + 210 * 128)
    assert admissible([b], [a], max_batch=8, kv_budget=lengths_only, row_cost=COST) == 0
    assert admissible([b], [a], max_batch=8, kv_budget=2 * (210 * 256 + 300 * 128),
                      row_cost=COST) == 1
