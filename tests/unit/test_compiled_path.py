"""The compiled path: which models it takes, how often it traces, and that it decodes."""

import pytest

from batchlab.cells.spec import expand
from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.core.scheduler import Scheduler
from batchlab.engine.paths import compiled
from batchlab.engine.paths.compiled import CompiledScheduler, unsupported_reason
from batchlab.matrix.engine_run import Unsupported, run_cell
from batchlab.zoo import load


def test_refuses_models_with_ring_or_state_layers():
    assert unsupported_reason(load("llama").model) is None
    reason = unsupported_reason(load("gemma3").model)
    assert "RotatingKVCache" in reason and "l1 or fast" in reason
    assert "ArraysCache" in unsupported_reason(load("qwen3.5").model)
    with pytest.raises(ValueError, match="RotatingKVCache"):
        CompiledScheduler(load("gemma3").model)


def test_a_refused_model_is_an_unsupported_cell():
    cell = next(c for c in expand({"sweep": [{"models": ["gemma3"], "paths": ["compiled"],
                                              "batch": [1], "padding": ["equal"],
                                              "scripts": ["static"], "contexts": ["short"]}],
                                   "contexts": {"short": 5}})
                if c.path == "compiled")
    with pytest.raises(Unsupported, match="cannot run gemma3"):
        run_cell(cell)


def decode(kind, model, prompts, max_tokens=40):
    scheduler = kind(model, ScheduleConfig(prefill_batch_size=8, completion_batch_size=8))
    scheduler.insert([Request(name=f"r{i}", prompt=tuple(p), max_tokens=max_tokens)
                      for i, p in enumerate(prompts)])
    tokens: dict[str, list[int]] = {}
    while scheduler.num_active:
        for e in scheduler.step():
            tokens.setdefault(e.name, []).append(e.token)
    return tokens


def test_traces_once_per_batch_and_width_and_matches_l1_on_cpu(monkeypatch):
    """One trace per (B, width), shared by every scheduler of a model; on the CPU backend
    the tokens equal l1's (the matrix compares the logprob bits too)."""
    model = load("llama").model
    traced = []
    clean = compiled.decode_forward

    def counting(m, inputs, idx, left_padding, *buffers):
        traced.append((inputs.shape[0], buffers[0].shape[2]))
        return clean(m, inputs, idx, left_padding, *buffers)

    monkeypatch.setattr(compiled, "decode_forward", counting)
    monkeypatch.setattr(compiled, "_DECODERS", {})
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [4]]
    first = decode(CompiledScheduler, model, prompts)
    # the 1-token prompt decodes alone first; 40 tokens cross the 32-column step; rows
    # that joined later finish later, so B runs 1 -> 3 -> 2
    assert len(traced) == len(set(traced)) and {b for b, _ in traced} == {1, 2, 3}
    assert {w for _, w in traced} == {32, 64}
    seen = list(traced)
    again = decode(CompiledScheduler, model, prompts)
    assert traced == seen  # a second scheduler reuses every trace
    assert first == again == decode(Scheduler, model, prompts)
