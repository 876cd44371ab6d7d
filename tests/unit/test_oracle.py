"""The oracle classifies itself: the gemma2-GQA batch bug is ORACLE-BUG, llama agrees."""

from batchlab.cells.spec import expand
from batchlab.oracle.regen import make_golden


def cell(model: str, batch: int, padding: str = "ragged"):
    return expand({"sweep": [{"models": [model], "batch": [batch], "padding": [padding],
                              "scripts": ["static"], "contexts": ["short"]}]})[0]


def test_gemma2_gqa_at_b_equal_kv_heads_is_a_silent_oracle_bug():
    golden = make_golden(cell("gemma2-gqa", 2))
    assert golden.serial_check == "oracle-bug"
    bug = golden.oracle_bug
    assert bug["kind"] == "serial-mismatch"
    assert bug["rows"] and bug["first_step"] is not None
    assert "batch" in bug["detail"] and "serial" in bug["detail"]


def test_gemma2_gqa_at_other_b_crashes_in_batch_mode_only():
    golden = make_golden(cell("gemma2-gqa", 3))
    assert golden.oracle_bug["kind"] == "batch-crash"
    assert golden.trajectory is None


def test_full_attention_oracle_agrees_with_its_serial_path():
    golden = make_golden(cell("llama", 3))
    assert golden.serial_check == "agrees" and golden.oracle_bug is None
    assert sorted(golden.trajectory.rows) == ["A", "B", "C"]


def test_sliding_models_skip_the_serial_check_with_a_reason():
    golden = make_golden(cell("gemma3", 2))
    assert golden.serial_check.startswith("skipped: sliding-window")
