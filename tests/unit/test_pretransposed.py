"""pretransposed.py: the fast path's projections with ``W.T`` made once (opt-in, CUDA).

On the CPU: the clone's forward gives every logit byte of the model's (zoo models with a
tied head, q/k norms, biases), its graph has exactly one Transpose node fewer per
projection, and the fast path builds it only when switched on (on CUDA).
"""

from __future__ import annotations

import collections
import re

import mlx.core as mx
import pytest
from mlx import nn

from batchlab.engine.core.layers import make_batch_caches
from batchlab.engine.paths.fast.pretransposed import (
    PretransposedEmbedding,
    PretransposedLinear,
    pretransposed_model,
)
from batchlab.zoo import load


def _ops(tmp_path, *arrays) -> collections.Counter:
    path = tmp_path / "graph.dot"
    mx.export_to_dot(str(path), *arrays)
    return collections.Counter(re.findall(r'\[label ="([^"]+)"', path.read_text()))


def _bytes(a: mx.array) -> bytes:
    return bytes(memoryview(a.astype(mx.float32)))


@pytest.mark.parametrize("name", ["llama", "qwen3", "minicpm"])
def test_the_clone_computes_every_byte_with_one_node_fewer_per_projection(name, tmp_path):
    model = load(name).model
    clone = pretransposed_model(model)
    linears = sum(type(m) is nn.Linear for _, m in model.named_modules())
    tied = type(model.model.embed_tokens) is nn.Embedding and not hasattr(model, "lm_head")
    assert sum(type(m) is PretransposedLinear for _, m in clone.named_modules()) == linears
    assert not any(isinstance(m, PretransposedLinear) for _, m in model.named_modules())
    prompt = mx.array([[3, 5, 7, 11, 13, 17], [19, 23, 29, 31, 37, 41]])
    caches = [make_batch_caches(model, 2), make_batch_caches(model, 2)]
    for tokens in (prompt, prompt[:, -1:] + 1, prompt[:, -1:] + 2):  # prefill, 2 decodes
        want = model(tokens, cache=caches[0])
        got = clone(tokens, cache=caches[1])
        assert _bytes(got) == _bytes(want)
    before = _ops(tmp_path, model(prompt[:, :1] + 3, cache=make_batch_caches(model, 2)))
    after = _ops(tmp_path, clone(prompt[:, :1] + 3, cache=make_batch_caches(model, 2)))
    assert before["Transpose"] - after["Transpose"] == linears + tied
    assert sum(before.values()) - sum(after.values()) == linears + tied


def test_a_biased_projection_and_the_weights_are_shared():
    linear = nn.Linear(16, 8, bias=True)
    embed = nn.Embedding(10, 16)
    model = nn.Sequential(linear)
    model.embed = embed
    clone = pretransposed_model(model)
    x = mx.random.normal((3, 2, 16), key=mx.random.key(5))
    assert type(clone.layers[0]) is PretransposedLinear
    assert type(clone.embed) is PretransposedEmbedding
    assert clone.layers[0].weight is linear.weight  # no copy
    assert _bytes(clone.layers[0](x)) == _bytes(linear(x))
    assert _bytes(clone.embed.as_linear(x)) == _bytes(embed.as_linear(x))
    names = [n for n, _ in nn.utils.tree_flatten(clone.parameters())]
    assert not any("_wt" in n for n in names)  # no parameter added


def test_fast_builds_the_clone_only_when_switched_on_on_cuda(monkeypatch):
    from batchlab.engine.paths.fast import path as fast

    model = load("llama").model
    monkeypatch.setenv("BATCHLAB_FAST_PRETRANSPOSE", "1")
    on_the_cpu = fast.FastScheduler(model).model  # one-row fusion's clone, no transposes
    assert not any(isinstance(m, PretransposedLinear) for _, m in on_the_cpu.named_modules())
    monkeypatch.setattr(fast, "on_cuda", lambda: True)
    monkeypatch.setenv("BATCHLAB_FAST_GQA", "0")
    clone = fast.FastScheduler(model).model  # CUDA: no one-row fusion unless switched on
    assert type(clone.model.layers[0].self_attn.q_proj) is PretransposedLinear
    assert type(model.model.layers[0].self_attn.q_proj) is nn.Linear
    monkeypatch.setenv("BATCHLAB_FAST_PRETRANSPOSE", "0")
    assert fast.FastScheduler(model).model is model
