"""The GPU mutant runner's verdict and its stand-in mutmut package (gate/mutation_gpu.py)."""

import subprocess
import sys

from batchlab.gate.mutation_gpu import verdict, write_shim


def test_a_moved_status_kills_and_names_the_cell():
    clean = {"a": "PASS", "b": "FAIL", "c": "ORACLE-BUG"}
    assert verdict(clean, {"a": "PASS", "b": "FAIL", "c": "ORACLE-BUG"}) == ("survived", [])
    assert verdict(clean, {"a": "FAIL", "b": "FAIL", "c": "ORACLE-BUG"}) == ("killed", ["a"])
    # a clean FAIL that passes under the mutant moved too: the status, not PASS, is the baseline
    assert verdict(clean, {"a": "PASS", "b": "PASS", "c": "ORACLE-BUG"}) == ("killed", ["b"])


def test_a_cell_missing_under_the_mutant_kills():
    assert verdict({"a": "PASS", "b": "PASS"}, {"a": "PASS"}) == ("killed", ["b"])


def test_the_shim_package_imports_in_a_fresh_process(tmp_path):
    shim = write_shim(tmp_path / "shim")
    code = ("from mutmut.mutation.trampoline import wrap_in_trampoline, MutantDict;"
            " print(MutantDict)")
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(shim)},
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "dict" in done.stdout


def test_statuses_read_a_report_folder_and_none_where_nothing_was_written(tmp_path):
    from batchlab.gate.mutation_gpu import statuses
    from batchlab.report.files import JSONL

    line = ('{"batch": 2, "cell_id": "l1/llama/B2/ragged/static/ctx-short", "context": "short", '
            '"detail": "ok", "divergence": null, "kl": null, "model": "llama", "padding": '
            '"ragged", "path": "l1", "rerun": "", "script": "static", "seconds": 0.1, '
            '"status": "FAIL", "tokens": 4, "traceback": null}')
    (tmp_path / JSONL).write_text(line + "\n")
    assert statuses(tmp_path) == {"l1/llama/B2/ragged/static/ctx-short": "FAIL"}
    assert statuses(tmp_path / "absent") == {}
