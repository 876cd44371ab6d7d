"""The CUDA campaign runner's choices (gate/mutation_cuda.py): which cells kill, what is
reset between cells, and the misuse it refuses."""

import sys
import types

import pytest

from batchlab.gate import mutation_cuda
from batchlab.gate.mutation_cuda import killers

STEM = "batchlab.engine.kernels.row_attention.x__cuda_row_attention"


def test_killers_are_the_clean_passes_that_called_the_function_cheapest_first():
    cells = {
        "invariant/llama-mha/B8": {"status": "PASS", "seconds": 17.8, "functions": [STEM]},
        "invariant-blocked/llama-mha/B8": {"status": "PASS", "seconds": 14.7,
                                           "functions": [STEM, "other.f"]},
        "kv8/llama-hd64/B4": {"status": "ERROR", "seconds": 18.8, "functions": [STEM]},
        "l1/gemma3/B3": {"status": "PASS", "seconds": 1.0, "functions": ["other.f"]},
    }
    # a cell that fails clean cannot kill; one that never called the function cannot either
    assert killers(STEM, cells) == ["invariant-blocked/llama-mha/B8", "invariant/llama-mha/B8"]
    assert killers("absent.f", cells) == []


def test_each_cell_starts_with_mlx_lms_helper_and_no_built_spans(monkeypatch):
    from batchlab.engine.kernels import row_prefill

    def helper(*args, **kwargs):
        return "mlx-lm"

    def dispatch(*args, **kwargs):
        return "engine"

    dispatch.original = helper
    fake = types.ModuleType("mlx_lm.models.fake_for_test")
    fake.scaled_dot_product_attention = dispatch
    monkeypatch.setitem(sys.modules, "mlx_lm.models.fake_for_test", fake)
    monkeypatch.setitem(row_prefill._SPANS, ((0,), (1,), (1,)), ("a", "b", "c"))
    mutation_cuda._fresh_state()
    assert fake.scaled_dot_product_attention is helper
    assert row_prefill._SPANS == {}


def test_a_mutant_child_refuses_a_mutant_the_environment_does_not_name(tmp_path, monkeypatch):
    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    with pytest.raises(ValueError, match="MUTANT_UNDER_TEST"):
        mutation_cuda.mutant_child("pkg.mod.x_f__mutmut_1", [], {}, "m.toml", True, 10.0,
                                   tmp_path / "out.json")
