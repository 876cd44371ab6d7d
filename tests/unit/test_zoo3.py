"""zoo3's models on the engine's paths: which paths refuse which model, and why.

llama-dynamic's RoPE (mlx-lm's ``DynamicNTKScalingRoPE``) reads the offset as one Python
number, as gpt-bigcode's positions do (``np.arange(offset, offset + L)``). Before zoo3
the compiled path crashed on llama-dynamic at B=1 (the trace hands the RoPE an array),
invariant-blocked too (it pads one row to a block of rows) and invariant at B=3; they now
refuse such models by name (``engine/paths/refusals.py``), as they refuse afm7, whose
KV-reuse layer places its queries by the width of the keys it is handed, while l1, fast and
paged run them where mlx-lm does (B=1: bit-exact cells ``*/llama-dynamic/B1/*``,
``*/gpt-bigcode/B1/*``)."""

import mlx.core as mx
import pytest
from mlx_lm.models.rope_utils import DynamicNTKScalingRoPE

from batchlab.engine.core.layers import key_width_reader, scalar_offset_reader
from batchlab.engine.paths.registry import Unsupported, resolve_path
from batchlab.zoo import load

REFUSING = ("compiled", "invariant", "invariant-blocked")
READERS = {"llama-dynamic": "DynamicNTKScalingRoPE", "gpt-bigcode": "GPTBigCodeModel"}


@pytest.mark.parametrize("name", list(READERS))
@pytest.mark.parametrize("path", REFUSING)
def test_the_paths_that_cannot_run_a_scalar_offset_reader_refuse_it_by_name(path, name):
    model = load(name).model
    with pytest.raises(Unsupported) as refused:
        resolve_path(path, model, model_name=name)
    assert str(refused.value).startswith(
        f"path {path!r} cannot run {name}: its {READERS[name]} reads the "
        "position offset as one Python number, and ")
    assert str(refused.value).endswith(f"use the l1, fast or paged path at B=1 ({path} refuses it)")


@pytest.mark.parametrize("name", list(READERS))
@pytest.mark.parametrize("path", ["l1", "fast", "paged"])
def test_the_one_row_paths_take_it(path, name):
    assert resolve_path(path, load(name).model).name == path


@pytest.mark.parametrize("path", REFUSING)
def test_the_paths_that_cannot_run_a_key_width_reader_refuse_it_by_name(path):
    # afm7: compiled crashed at B=1 (its traced cache has no keys_and_values),
    # invariant-blocked too (its row blocks meet afm7's fused qkv), invariant failed its
    # solo gate (row C token 0: the batch's key width is not the row's)
    with pytest.raises(Unsupported) as refused:
        resolve_path(path, load("afm7").model, model_name="afm7")
    assert str(refused.value).startswith(
        f"path {path!r} cannot run afm7: its KVReuseAttention places its queries by the "
        "width of the keys it is handed, and ")
    assert str(refused.value).endswith(f"use the l1, fast or paged path ({path} refuses it)")


@pytest.mark.parametrize("name", ["ministral3", "llama-g4", "qwen3-mqa", "phi3", "gpt2",
                                  "exaone4", "cohere2", "granite-hybrid"])
def test_no_other_zoo3_model_reads_a_scalar_offset(name):
    model = load(name).model
    assert scalar_offset_reader(model) is None
    assert key_width_reader(model) is None
    for path in ("invariant", "invariant-blocked"):
        assert resolve_path(path, model).name == path
    if name in ("llama-g4", "qwen3-mqa", "phi3", "gpt2"):  # else rings or state: refused
        assert resolve_path("compiled", model).name == "compiled"


def test_what_the_refusal_prevents():
    # If mlx-lm's dynamic RoPE learns per-row offsets, these stop raising: lift the
    # refusal then (and the ORACLE-BUG pins of l1/llama-dynamic/B3/*).
    rope = DynamicNTKScalingRoPE(16, max_position_embeddings=8, traditional=False,
                                 base=10000.0, factor=4.0)
    x = mx.ones((2, 4, 1, 16))
    with pytest.raises(ValueError, match="Only length-1 arrays"):
        mx.eval(rope(x, offset=mx.array([9, 3])))
    with pytest.raises(ValueError, match="during function transformations"):
        mx.eval(mx.compile(lambda a, o: rope(a, offset=o))(x[:1], mx.array([9])))
    assert rope(x[:1], offset=9).shape == (1, 4, 1, 16)  # a number: runs


@pytest.mark.parametrize("name", ["gpt2", "gpt-bigcode"])
def test_the_vocabulary_is_the_token_table_not_the_position_table(name):
    # wpe (64 learned positions) sorts before wte: serve refused every id >= 64
    from batchlab.zoo.load import vocab_size

    assert vocab_size(load(name).model) == 320


@pytest.mark.parametrize(("name", "expected"), [("llama-dynamic", 1), ("gpt-bigcode", 1),
                                                ("afm7", 1), ("gpt2", 4)])
def test_serve_decodes_a_batch_sensitive_model_one_request_at_a_time(name, expected):
    # concurrent requests on llama-dynamic each failed with a 500 (the batch's offsets
    # crash its RoPE); on afm7 a padded row's answer was not its answer alone. One at a
    # time, each runs as mlx-lm runs it alone
    from batchlab.serve.engine_thread import ServeEngine

    engine = ServeEngine(load(name).model, max_batch=4, vocab_size=320)
    assert engine.max_batch == expected


def test_chunked_attention_is_refused_by_mlx_lm_and_by_the_engine():
    # llama4's ChunkedKVCache: BatchGenerator refuses it (no batch form), so no golden can
    # exist; the engine refuses it too, saying what to do (no llama4 zoo model: its every
    # cell would be the oracle's crash)
    from mlx import nn
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.models.cache import ChunkedKVCache

    from batchlab.engine.core.layers import batch_cache_for

    class Chunked(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = [nn.Linear(2, 2)]

        def make_cache(self):
            return [ChunkedKVCache(8)]

        def __call__(self, inputs, cache=None):
            return mx.zeros((*inputs.shape, 16))

    generator = BatchGenerator(Chunked(), max_tokens=3)
    generator.insert([[1, 2, 3]])
    with pytest.raises(ValueError, match="ChunkedKVCache'> does not yet support batching"):
        generator.next()
    with pytest.raises(ValueError) as refused:
        batch_cache_for(ChunkedKVCache(8), [0])
    assert str(refused.value) == (
        "ChunkedKVCache has no batch form (mlx-lm cannot batch it either); run this model "
        "at B=1 or give it KVCache/RotatingKVCache/ArraysCache layers")
