"""Where the default matrix and goldens are found: the checkout the package sits in (an
editable install), else the current directory (a non-editable ``pip install .``)."""

from __future__ import annotations

from pathlib import Path

from batchlab import defaults


def test_a_source_checkout_uses_its_own_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = Path(__file__).resolve().parents[2]
    assert defaults._project_root() == root
    assert defaults.DEFAULT_MATRIX == root / "matrices" / "default.toml"
    assert defaults.DEFAULT_GOLDENS == root / "goldens"


def test_an_installed_package_uses_the_current_directory(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"  # where a non-editable install puts the code
    site.mkdir()
    checkout = tmp_path / "checkout"
    (checkout / "matrices").mkdir(parents=True)
    monkeypatch.setattr(defaults, "_SOURCE_ROOT", site)
    monkeypatch.chdir(checkout)
    assert defaults._project_root() == checkout.resolve()


def test_matrix_run_and_golden_regen_use_every_core_by_default():
    import os

    from batchlab.cli import build_parser

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parser = build_parser()
    assert defaults.DEFAULT_JOBS == cores
    assert parser.parse_args(["matrix", "run"]).jobs == cores
    assert parser.parse_args(["golden", "regen"]).jobs == cores
    assert parser.parse_args(["matrix", "run", "--jobs", "1"]).jobs == 1
