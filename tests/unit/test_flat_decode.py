"""``flat_decode``: fast's decode forward on flat hidden states gives the modules' logits
bit for bit (llama and qwen3, ragged prompts, a join mid-stream), and only where it can."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx import nn
from mlx_lm.models import gemma, llama, qwen3

from batchlab.engine.core.batch import Request
from batchlab.engine.core.config import ScheduleConfig
from batchlab.engine.paths.fast import path as fast
from batchlab.engine.paths.fast.flat_decode import supports

COMMON = {"hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 48,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
          "rms_norm_eps": 1e-5, "vocab_size": 50, "rope_theta": 10000.0}


def _random(model: nn.Module) -> nn.Module:
    leaves = [(name, mx.random.normal(p.shape, key=mx.random.key(i)) * 0.5)
              for i, (name, p) in enumerate(nn.utils.tree_flatten(model.parameters()))]
    model.update(nn.utils.tree_unflatten(leaves))
    mx.eval(model.parameters())
    return model


def tiny(family: str, tied: bool = False) -> nn.Module:
    if family == "llama":
        return _random(llama.Model(llama.ModelArgs(model_type="llama", **COMMON,
                                                   tie_word_embeddings=tied)))
    return _random(qwen3.Model(qwen3.ModelArgs(model_type="qwen3", **COMMON,
                                               max_position_embeddings=512,
                                               tie_word_embeddings=tied)))


def emissions(model: nn.Module, flat: bool, fuse_one_row: bool = True,
              lengths: tuple[int, ...] = (5, 9, 3)) -> list[tuple[str, int, bytes]]:
    scheduler = fast.FastScheduler(model, ScheduleConfig(prefill_batch_size=4,
                                                         completion_batch_size=5))
    assert scheduler._flat and scheduler._fuse_one_row  # the test turns them off by hand
    scheduler._flat, scheduler._fuse_one_row = flat, fuse_one_row
    rng = np.random.default_rng(7)
    scheduler.insert([Request(name=f"r{i}", prompt=tuple(rng.integers(0, 50, n).tolist()),
                              max_tokens=6 + i) for i, n in enumerate(lengths)])
    out, steps = [], 0
    while scheduler.num_active:
        for e in scheduler.step():
            out.append((e.name, e.token, np.array(e.logprobs).tobytes()))
        steps += 1
        if steps == 3:  # a join: a left-padded row among the decoding ones (a mask)
            scheduler.insert([Request(name="late", prompt=(1, 2, 3, 4, 5, 6, 7), max_tokens=4)])
    return out


@pytest.mark.parametrize("family,tied", [("llama", False), ("llama", True), ("qwen3", False)])
def test_the_flat_forward_gives_the_modules_bits(family, tied):
    model = tiny(family, tied)
    flat, modules = emissions(model, True), emissions(model, False)
    assert len(flat) == len(modules) == 6 + 7 + 8 + 4
    assert flat == modules


@pytest.mark.parametrize("family,tied", [("llama", False), ("llama", True), ("qwen3", False)])
@pytest.mark.parametrize("lengths", [(5,), (5, 9, 3)])
def test_one_row_steps_fused_give_the_same_bits(family, tied, lengths):
    # one row from the start, or three that drain to one (r2 decodes alone at the end),
    # with a joiner; llama's one-row step also rotates q and k in one RoPE call
    model = tiny(family, tied)
    for flat in (True, False):
        fused, plain = emissions(model, flat, True, lengths), emissions(model, flat, False, lengths)
        assert len(fused) == sum(6 + i for i in range(len(lengths))) + 4
        assert fused == plain


def test_only_full_attention_llama_and_qwen3_models_take_it():
    assert supports(tiny("llama")) and supports(tiny("qwen3"))
    sliding = llama.Model(llama.ModelArgs(model_type="llama", **COMMON, sliding_window=4,
                                          layer_types=["sliding_attention", "full_attention"]))
    assert not supports(sliding)
    assert not supports(gemma.Model(gemma.ModelArgs(model_type="gemma", **COMMON)))
