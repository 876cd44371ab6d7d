"""The scheduler frees MLX's buffer cache where BatchGenerator does: every 512 decode
steps of its lifetime (mlx-lm 0.32 ``BatchGenerator._next``), after the step."""

from __future__ import annotations

import mlx.core as mx

from batchlab.engine.core.batch import Request
from batchlab.engine.core.scheduler import Scheduler
from batchlab.zoo import load


def test_buffer_cache_is_cleared_every_512_decode_steps(monkeypatch):
    scheduler = Scheduler(load("llama").model)
    cleared_at = []
    monkeypatch.setattr(mx, "clear_cache", lambda: cleared_at.append(scheduler.num_decode_steps))
    # a one-token prompt has nothing to prefill, so only decode steps can clear
    scheduler.insert([Request(name="a", prompt=(5,), max_tokens=1030)])
    emitted = 0
    while scheduler.num_active:
        emitted += len(scheduler.step())
    assert emitted == 1030
    assert scheduler.num_decode_steps == 1030  # each emits the token its forward fed
    assert cleared_at == [512, 1024]
