import os

import pytest

from batchlab.atomic import write_text_atomic


def test_write_text_atomic_writes_and_replaces(tmp_path):
    path = tmp_path / "sub" / "file.md"
    write_text_atomic(path, "one")
    write_text_atomic(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["file.md"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "file.md"
    write_text_atomic(path, "old")

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        write_text_atomic(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.md"]
