"""``persistent_decode``: fast's one-row step as one kernel for every layer (CUDA).

The kernel runs only on CUDA. Here ``row_step.step`` is replaced by the MLX ops it does, in
the modules' order, reading what the kernel reads (the step's ``meta``, the constants,
each layer's arrays by position) and writing each layer's new key and value into the
cache's buffers as the kernel does. So the host's side (room in the cache, buffers of
its own, the write column, the RoPE position, the count after the step, the arrays that
come after the kernel) must give the flat forward's bits on the CPU. The kernel's own
arithmetic is checked on the H200 (``tools/h200/row_step_probe.py``) and by the CUDA
matrix's fast cells, where it runs by default (their models are small)."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import tomllib
from mlx import nn
from mlx.utils import tree_flatten
from mlx_lm.models import gemma, llama
from mlx_lm.models.activations import swiglu
from test_flat_decode import COMMON, emissions, tiny

from batchlab.cells.select import select
from batchlab.cells.spec import expand
from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.kernels import row_step
from batchlab.engine.paths.fast import path as fast
from batchlab.engine.paths.fast import persistent_decode


def kernel_as_ops(model_of, write_cache: bool = True):
    """``row_step.step`` as MLX ops: what the kernel computes, from what it is handed
    (``model_of()``: the model whose RoPE modules rotate)."""

    def step(h, meta, barrier, consts, inv_freq, layer_arrays, shape, head_norms):
        layers = model_of().model.layers
        hidden, dim, n_q, n_kv, inter, n_layers = shape
        idx, start, _, cap = meta.tolist()
        eps_in, eps_post, eps_qk, scale = consts.tolist()
        per_layer = len(row_step.layer_input_names(head_norms))
        assert barrier.shape == (row_step.BARRIER_WORDS,) and len(layers) == n_layers
        for i, layer in enumerate(layers):
            arrays = layer_arrays[i * per_layer:(i + 1) * per_layer]
            in_norm, wq, wk, wv, wo, post_norm, wg, wu, wd = arrays[:9]
            keys, values = arrays[-2:]
            assert keys.shape[2] == cap and idx < cap
            xn = mx.fast.rms_norm(h, in_norm, eps_in)
            q = (xn @ wq.T).reshape(1, n_q, 1, dim)
            k = (xn @ wk.T).reshape(1, n_kv, 1, dim)
            v = (xn @ wv.T).reshape(1, n_kv, 1, dim)
            if head_norms:
                q = mx.fast.rms_norm(q, arrays[9], eps_qk)
                k = mx.fast.rms_norm(k, arrays[10], eps_qk)
            rope = layer.self_attn.rope
            q, k = rope(q, offset=meta[2:3]), rope(k, offset=meta[2:3])
            if write_cache:  # in place, as the kernel writes the buffers it is handed
                keys[..., idx:idx + 1, :] = k
                values[..., idx:idx + 1, :] = v
            out = mx.fast.scaled_dot_product_attention(
                q, keys[..., start:idx + 1, :], values[..., start:idx + 1, :], scale=scale)
            h = h + out.reshape(1, -1) @ wo.T
            xn = mx.fast.rms_norm(h, post_norm, eps_post)
            h = h + swiglu(xn @ wg.T, xn @ wu.T) @ wd.T
        return h

    return step


def kernel_emissions(monkeypatch, model: nn.Module, lengths: tuple[int, ...],
                     write_cache: bool = True):
    calls = []
    real = persistent_decode.RowStep.logits

    def counted(self, tokens, caches):  # rows, then the write column and width after it
        out = real(self, tokens, caches)
        calls.append((tokens.shape[0], caches[0]._idx, caches[0].keys.shape[2]))
        return out

    monkeypatch.setattr(row_step, "step", kernel_as_ops(lambda: model, write_cache))
    monkeypatch.setattr(persistent_decode.RowStep, "logits", counted)
    built = fast.FastScheduler.__init__

    def with_kernel(self, *args, **kwargs):
        built(self, *args, **kwargs)
        self._row_step = persistent_decode.RowStep(self.model)

    monkeypatch.setattr(fast.FastScheduler, "__init__", with_kernel)
    return emissions(model, True, True, lengths), calls


@pytest.mark.parametrize("family,tied", [("llama", False), ("llama", True), ("qwen3", False)])
@pytest.mark.parametrize("lengths", [(5,), (5, 9, 3), (254,)])
def test_the_step_is_wired_as_the_modules(monkeypatch, family, tied, lengths):
    # one row from the start; three that drain to one, with a joiner (the row left alone
    # was padded: its cache is trimmed to a strided view); one that fills the cache's
    # first 256 columns before the joiner comes
    model = tiny(family, tied)
    plain = emissions(model, True, True, lengths)
    stepped, calls = kernel_emissions(monkeypatch, model, lengths)
    assert calls and {rows for rows, _, _ in calls} == {1}
    assert stepped == plain
    if lengths == (254,):  # the third step finds the 256 columns full
        assert [(idx, width) for _, idx, width in calls[:3]] == [
            (255, 256), (256, 256), (257, 512)]


# cuda-repeat.toml's one-row cells, written for the kernel: growth, park-resume,
# prefix-join, a joiner left alone over a trimmed cache, sampling
ONE_ROW_CELLS = "fast/*/B1/*/ctx-grow/*,fast/*/B2/*,fast/*/B1/*/*_t0.8*"


def test_the_one_row_cells_of_the_cuda_repeat_matrix_give_the_flat_forwards_bits(monkeypatch):
    from batchlab.matrix.engine_run import run_cell

    matrix = Path(__file__).parents[2] / "matrices" / "cuda-repeat.toml"
    with open(matrix, "rb") as f:
        cells = select(expand(tomllib.load(f)), ONE_ROW_CELLS, None)
    assert len(cells) == 18
    plain = [run_cell(cell, keep_values=False) for cell in cells]
    current, taken = {}, []
    real = persistent_decode.RowStep.logits

    def counted(self, tokens, caches):
        taken.append(tokens.shape[0])
        return real(self, tokens, caches)

    built = fast.FastScheduler.__init__

    def with_kernel(self, *args, **kwargs):
        built(self, *args, **kwargs)
        current["model"] = self.model
        self._row_step = persistent_decode.RowStep(self.model)

    monkeypatch.setattr(row_step, "step", kernel_as_ops(lambda: current["model"]))
    monkeypatch.setattr(persistent_decode.RowStep, "logits", counted)
    monkeypatch.setattr(fast.FastScheduler, "__init__", with_kernel)
    for cell, expected in zip(cells, plain, strict=True):
        before = len(taken)
        assert run_cell(cell, keep_values=False) == expected, cell.id
        assert len(taken) > before, cell.id


def test_a_kernel_that_writes_no_cache_differs(monkeypatch):
    # the wiring test can fail: the kernel's in-place write left out
    model = tiny("llama")
    plain = emissions(model, True, True, (5,))
    stepped, calls = kernel_emissions(monkeypatch, model, (5,), write_cache=False)
    assert calls and stepped != plain


def test_llama_and_qwen3_models_at_real_head_dims_take_it_and_others_say_why():
    wide = {**COMMON, "head_dim": 64, "hidden_size": 64}
    assert persistent_decode.unsupported_reason(
        llama.Model(llama.ModelArgs(model_type="llama", **wide))) is None
    assert "head dim 8 (a multiple of 64 needed)" in \
        persistent_decode.unsupported_reason(tiny("llama"))
    gem = gemma.Model(gemma.ModelArgs(model_type="gemma", **COMMON))
    assert "llama or qwen3" in persistent_decode.unsupported_reason(gem)
    odd = llama.Model(llama.ModelArgs(model_type="llama", **{**wide, "intermediate_size": 42}))
    assert "whole 16-byte chunks" in persistent_decode.unsupported_reason(odd)
    scaled = llama.Model(llama.ModelArgs(model_type="llama", **wide))
    scaled.model.layers[1].input_layernorm.eps = 1e-6
    assert "different norm eps" in persistent_decode.unsupported_reason(scaled)


def test_the_kernels_shared_memory_is_what_ptxas_reported():
    # ptxas -v's smem for these shapes (tools/h200/row_step_compile_check.py)
    assert row_step.shared_bytes(mx.bfloat16, 2048, 64, 32, 8192, 16, False) == 24320
    assert row_step.shared_bytes(mx.bfloat16, 1024, 128, 16, 3072, 28, True) == 15840
    assert row_step.shared_bytes(mx.bfloat16, 4096, 128, 32, 14336, 32, False) == 40320
    assert row_step.shared_bytes(mx.float32, 2048, 64, 32, 8192, 16, False) == 40704
    assert row_step.shared_bytes(mx.float32, 4096, 128, 32, 14336, 32, False) > \
        row_step.SHARED_BYTES


def test_the_kernels_inputs_and_pointer_table():
    names = row_step.input_names(2, True)
    assert names[:5] == ["h_in", "meta", "barrier", "consts", "inv_freq"]
    assert names[5:18] == [f"l0_{n}" for n in (
        "in_norm", "wq", "wk", "wv", "wo", "post_norm", "wg", "wu", "wd", "q_norm", "k_norm",
        "keys", "values")]
    assert len(names) == 5 + 2 * 13
    source = row_step.source(2, False)
    assert "tab[1][10] = l1_values;" in source and "tab[0][0] = l0_in_norm;" in source
    assert "{table}" not in source


def test_the_step_holds_the_models_constants():
    model = tiny("qwen3")
    step = persistent_decode.RowStep(model)
    attn = model.model.layers[0].self_attn
    assert step.shape == (32, 8, 4, 2, 48, 2) and step.head_norms
    assert step.consts.tolist() == np.array([1e-5, 1e-5, 1e-5, attn.scale],
                                            dtype=np.float32).tolist()
    assert len(step.weights[0]) == 11
    assert step.weights[0][1] is attn.q_proj.weight
    assert step.weights[1][10] is model.model.layers[1].self_attn.k_norm.weight
    assert step.barrier.shape == (row_step.BARRIER_WORDS,)


def test_only_one_row_of_full_attention_caches_in_the_models_dtype_runs_it():
    step = persistent_decode.RowStep(tiny("llama"))  # float32 weights
    caches = {}
    for name, rows, dtype in (("one", 1, mx.float32), ("two", 2, mx.float32),
                              ("half", 1, mx.bfloat16)):
        caches[name] = BatchKV([0] * rows)
        caches[name].update_and_fetch(mx.zeros((rows, 2, 3, 8), dtype),
                                      mx.zeros((rows, 2, 3, 8), dtype))
    assert step.runs([caches["one"], caches["one"]])
    assert not step.runs([caches["two"]])
    assert not step.runs([caches["half"]])
    assert not step.runs([BatchKV([0])])  # nothing prefilled yet


def test_room_for_one_grows_a_full_cache_and_wrote_one_counts_the_column():
    cache = BatchKV([1])
    cache.update_and_fetch(mx.ones((1, 2, 256, 8)), mx.ones((1, 2, 256, 8)))
    cache.room_for_one()
    assert cache.keys.shape == (1, 2, 512, 8) and cache._idx == 256
    cache.wrote_one()
    assert cache._idx == 257 and cache.offset_host.tolist() == [256]
    cache.room_for_one()  # room already
    assert cache.keys.shape == (1, 2, 512, 8)


class FakeDriver:
    """libcuda's three calls, answering ``sms`` SMs (``failing``: the call that errs)."""

    def __init__(self, sms: int, failing: str = ""):
        self.sms, self.failing = sms, failing

    def cuInit(self, flags):
        return int(self.failing == "cuInit")

    def cuDeviceGet(self, device, ordinal):
        device._obj.value = ordinal
        return int(self.failing == "cuDeviceGet")

    def cuDeviceGetAttribute(self, value, attribute, device):
        assert attribute == 16  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        value._obj.value = self.sms
        return int(self.failing == "cuDeviceGetAttribute")


@pytest.mark.parametrize("driver,expected", [
    (FakeDriver(78), 78), (FakeDriver(78, "cuInit"), row_step.SMS),
    (FakeDriver(78, "cuDeviceGetAttribute"), row_step.SMS), (None, row_step.SMS)])
def test_the_launch_takes_a_block_per_sm_as_the_driver_counts_them(monkeypatch, driver,
                                                                    expected):
    def load(name):
        assert name == "libcuda.so.1"
        if driver is None:
            raise OSError("no driver")
        return driver

    monkeypatch.setattr(row_step.ctypes, "CDLL", load)
    monkeypatch.delenv(row_step.BLOCKS_ENV, raising=False)
    row_step.sm_count.cache_clear()
    try:
        assert row_step.blocks() == expected * row_step.BLOCKS_PER_SM
        monkeypatch.setenv(row_step.BLOCKS_ENV, "40")
        assert row_step.blocks() == 40
    finally:
        row_step.sm_count.cache_clear()


def test_the_kernel_is_on_by_default_up_to_its_layers_bytes(monkeypatch):
    model = tiny("llama", False)
    layers = sum(v.nbytes for layer in model.model.layers
                 for _, v in tree_flatten(layer.parameters()))
    monkeypatch.setattr(persistent_decode, "DEFAULT_MAX_LAYER_BYTES", layers)
    assert persistent_decode.on_by_default(model)
    monkeypatch.setattr(persistent_decode, "DEFAULT_MAX_LAYER_BYTES", layers - 1)
    assert not persistent_decode.on_by_default(model)


@pytest.mark.parametrize("cuda,switch,default,built", [
    (True, None, True, True), (True, None, False, False), (True, "1", False, True),
    (True, "0", True, False), (True, "yes", True, False), (False, "1", True, False)])
def test_a_one_row_forward_is_built_where_switched_or_by_default(monkeypatch, cuda, switch,
                                                                  default, built):
    class Module:
        @staticmethod
        def unsupported_reason(model):
            return None

    monkeypatch.setattr(fast, "on_cuda", lambda: cuda)
    monkeypatch.delenv("BATCHLAB_TEST_SWITCH", raising=False)
    if switch is not None:
        monkeypatch.setenv("BATCHLAB_TEST_SWITCH", switch)
    got = fast._opted_in("BATCHLAB_TEST_SWITCH", Module, lambda model: "forward", object(),
                         lambda model: default)
    assert got == ("forward" if built else None)


def test_the_launch_loads_eight_keys_values_ahead_unless_told_otherwise(monkeypatch):
    # 8 by default: the H200's paired A/B (reports/bench/cuda-sm90/issue28-stream/); the
    # environment's value reaches the kernel's template as it is
    launched = []
    monkeypatch.setattr(row_step, "_kernel", lambda layers, norms: (
        lambda inputs, **arguments: launched.append(dict(arguments["template"])) or [None]))
    shape = (64, 64, 4, 2, 128, 2)
    h = mx.zeros((1, 64), dtype=mx.bfloat16)
    for told in (None, "0", "16"):
        if told is None:
            monkeypatch.delenv(row_step.VALUES_AHEAD_ENV, raising=False)
        else:
            monkeypatch.setenv(row_step.VALUES_AHEAD_ENV, told)
        row_step.step(h, None, None, None, None, [], shape, False)
    assert [t["VA"] for t in launched] == [8, 0, 16]
    assert all(t["STREAM"] == 0 and t["W"] == 8 and t["KS"] == 64 for t in launched)
