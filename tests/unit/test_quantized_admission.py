"""Quantized paths: a fresh row admitted beside a row with history decodes as it does
alone (one batch cache has one format switch, so they never share a prompt batch)."""

import mlx.core as mx
import numpy as np

from batchlab.engine.core.batch import Request
from batchlab.engine.core.history import prefix_history
from batchlab.engine.paths.registry import resolve_path
from batchlab.zoo import load

MODEL = "llama-hd64"
FRESH = (40, 41, 42, 43, 44, 45)


def _tokens(scheduler, names):
    """Per row, (token, the logprob bytes it was sampled from) at every step."""
    out = {n: [] for n in names}
    while scheduler.num_active:
        for e in scheduler.step():
            out[e.name].append((e.token, np.array(e.logprobs.astype(mx.float32)).tobytes()))
    return out


def test_a_fresh_row_beside_a_history_row_decodes_as_alone():
    model = load(MODEL).model
    path = resolve_path("kv8", model)
    alone = path.scheduler(model)
    alone.insert([Request(name="F", prompt=FRESH, max_tokens=8)])
    want = _tokens(alone, ["F"])["F"]
    both = path.scheduler(model)
    history = prefix_history(model, tuple(range(3, 23)), 2048)
    both.insert([Request(name="H", prompt=(7, 8, 9), max_tokens=8, history=history),
                 Request(name="F", prompt=FRESH, max_tokens=8)])
    got = _tokens(both, ["H", "F"])
    assert len(got["H"]) == 8
    assert got["F"] == want
