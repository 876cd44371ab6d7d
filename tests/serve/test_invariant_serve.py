"""``serve --path invariant``: a served answer equals the same request sent alone.

The engine thread schedules concurrent requests however they arrive; on the invariant
path that must not change a bit of any answer (tokens and logprobs). gpt-oss is float32
with sliding-window layers, where l1's shared ring pointer does change them (the
control below), so the test can fail.
"""

from __future__ import annotations

import queue

from batchlab.engine.core.sampler import GREEDY
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths.invariant.path import InvariantScheduler
from batchlab.serve.engine_thread import Done, ServeEngine, Token
from batchlab.zoo import load

MODEL = "gpt-oss"
PROMPTS = [[5, 9, 200, 17, 3, 88, 41, 7, 9, 12, 60], [1], [33, 44, 55],
           [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 4, 3], [250, 251], [70, 71, 72, 73, 74]]
MAX_TOKENS = 12


def answers(scheduler_class, prompts, together: bool) -> list[list[tuple]]:
    """Each prompt's (token, logprob, top-5) per token: all submitted at once, or each
    submitted after the previous one finished."""
    engine = ServeEngine(load(MODEL).model, scheduler_class=scheduler_class, max_batch=8,
                         vocab_size=256).start()

    def submit(prompt):
        events = queue.Queue()
        engine.submit({"prompt": prompt, "max_tokens": MAX_TOKENS, "sampling": GREEDY,
                       "logprobs": 5}, events.put)
        return events

    def drain(events):
        out = []
        while not isinstance(event := events.get(timeout=60), Done):
            assert isinstance(event, Token)
            out.append((event.id, event.logprob, event.top))
        return out

    try:
        if together:
            return [drain(e) for e in [submit(p) for p in PROMPTS]]
        return [drain(submit(p)) for p in prompts]
    finally:
        engine.close()


def test_a_served_answer_equals_the_same_request_sent_alone():
    alone = answers(InvariantScheduler, PROMPTS, together=False)
    together = answers(InvariantScheduler, PROMPTS, together=True)
    assert [len(a) for a in together] == [MAX_TOKENS] * len(PROMPTS)
    assert together == alone


def test_control_l1_answers_change_with_their_neighbours():
    alone = answers(Scheduler, PROMPTS, together=False)
    together = answers(Scheduler, PROMPTS, together=True)
    assert [a == b for a, b in zip(together, alone)].count(False) >= 1
