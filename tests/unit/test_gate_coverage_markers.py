"""The coverage gate's markers: every marked engine line names a known reason, and the
markers are few enough to read (the report lists each one)."""

import pytest

from batchlab.gate import coverage


def test_every_marker_names_a_known_reason():
    found = coverage.engine_exclusions()
    assert found, "no markers found: the scan is broken"
    assert {e.tag for e in found} <= set(coverage.REASONS)
    assert all(e.reason for e in found)


def test_an_unknown_reason_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "x.py").write_text("if a:  # not gated: because\n    pass\n")
    monkeypatch.setattr(coverage, "ENGINE_DIR", tmp_path)
    monkeypatch.setattr(coverage, "PROJECT_ROOT", tmp_path)
    with pytest.raises(ValueError, match="unknown coverage reason 'because'"):
        coverage.engine_exclusions()


def test_every_reason_is_used():
    used = {e.tag for e in coverage.engine_exclusions()}
    assert used == set(coverage.REASONS), set(coverage.REASONS) - used
