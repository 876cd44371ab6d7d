"""The zoo: pinned weights, deterministic atomic builds, loading, and one forward each.

Builds go to a temporary cache (all 13 models build in about two seconds on 2 cores).
"""

import dataclasses
import os
import shutil

import mlx.core as mx
import pytest

from batchlab.zoo import (
    ZOO,
    build,
    fingerprint,
    layer_kinds,
    load,
    model_dir_name,
    param_count,
    resolve,
    spec_hash,
)
from batchlab.zoo.build import REQUIRED_FILES
from batchlab.zoo.tokenizer import BOS_ID, EOS_ID, PAD_ID
from batchlab.zoo.weights import random_weights

# name -> (directory name = name + spec hash, weight fingerprint). A failure here means a
# spec, the weight recipe, mlx-lm's parameter layout or MLX's RNG changed. If intended: when
# weights.py or tokenizer.py changed, bump build.RECIPE_VERSION (or caches keep old bytes
# under the old name); pin the new values; regenerate that model's goldens (now STALE).
PINNED = {
    "llama": ("llama-914784d4a75b", "bdd513fd0c57778e"),
    "llama-flat": ("llama-flat-7a52c419d68e", "3f8383a5590de0d0"),
    "qwen3": ("qwen3-b717bd8feb4c", "f52646f080561096"),
    "minicpm": ("minicpm-cb6ec3fdc8e6", "85f5e7b462ad9131"),
    "gemma3": ("gemma3-f155331bc725", "487d922d966c37b5"),
    "gemma4-12b": ("gemma4-12b-b31aafef8e48", "3331c7538ca68bce"),
    "gemma4-e4b": ("gemma4-e4b-3fc48df9d575", "ced277338ff813ed"),
    "gemma4-26b": ("gemma4-26b-08667b15fcca", "ca417a72350084d5"),
    "qwen3-moe": ("qwen3-moe-33f3da12fafa", "7451fb148b4a4fde"),
    "gpt-oss": ("gpt-oss-b22e270c415e", "7fe98d11baf9eb0b"),
    "qwen3.5": ("qwen3.5-cc120786123d", "3290883ff77a8d78"),
    "mamba2": ("mamba2-dce7979f10e9", "44e29150f48a501f"),
    "lfm2": ("lfm2-b1e6b3e0536e", "cd0d40f6bce95f29"),
    "llama-hd64": ("llama-hd64-b4c108b0ea3c", "8787d13c0da47e20"),
    "qwen3-hd128": ("qwen3-hd128-56b57b2ebb75", "d33caac049c2c77d"),
    "gemma2-gqa": ("gemma2-gqa-7eba177eaf9c", "cdcd680f3e37fa59"),
}

LAYER_KINDS = {
    "llama": "full×2",
    "llama-flat": "full×2",
    "qwen3": "full×2",
    "minicpm": "full×2",
    "gemma3": "sliding8×2 full×2",
    "gemma4-12b": "sliding8×2 full×2",
    "gemma4-e4b": "sliding8 full +per-layer-input +kv-shared",
    "gemma4-26b": "sliding8×2 full×2 +moe",
    "qwen3-moe": "full×2 +moe",
    "gpt-oss": "sliding8 full +moe",
    "qwen3.5": "ssm×3 full",
    "mamba2": "ssm×2",
    "lfm2": "ssm×2 full×2",
    "llama-hd64": "full×2",
    "qwen3-hd128": "full×2",
    "gemma2-gqa": "full×2",
}


@pytest.fixture(scope="module", autouse=True)
def zoo_cache(tmp_path_factory):
    """A private BATCHLAB_CACHE for the whole module; returns its zoo folder."""
    root = tmp_path_factory.mktemp("batchlab-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BATCHLAB_CACHE", str(root))
        yield root / "zoo"


def test_every_zoo_model_is_pinned():
    assert list(PINNED) == list(ZOO)
    assert list(LAYER_KINDS) == list(ZOO)


@pytest.mark.parametrize("name", list(ZOO))
def test_spec_and_weights_match_their_pins(name):
    path = resolve(name)
    assert (path.name, fingerprint(path)) == PINNED[name]


@pytest.mark.parametrize("name", list(ZOO))
def test_forward_pass_gives_finite_logits_in_the_spec_dtype(name):
    from mlx_lm.utils import load_model

    model, _ = load_model(resolve(name))
    logits = model(mx.array([[104, 105, 32, 0, 255, BOS_ID]]))
    assert logits.shape == (1, 6, ZOO[name].config["vocab_size"])
    assert logits.dtype == getattr(mx, ZOO[name].dtype)
    assert mx.all(mx.isfinite(logits)).item()


def test_builds_are_byte_identical_across_directories(tmp_path):
    spec = ZOO["qwen3.5"]  # has a float32 A_log inside a bfloat16 model
    a, b = build(spec, tmp_path / "a"), build(spec, tmp_path / "b")
    for f in REQUIRED_FILES:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_build_is_atomic_and_reuses_a_complete_directory(tmp_path):
    spec = ZOO["llama"]
    first = build(spec, tmp_path)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert build(spec, tmp_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert os.listdir(tmp_path) == [first.name]  # no temp dir left behind


def test_an_incomplete_directory_is_refused_not_reused(tmp_path):
    spec = ZOO["llama"]
    (tmp_path / model_dir_name(spec)).mkdir()
    with pytest.raises(RuntimeError, match="incomplete"):
        build(spec, tmp_path)


@pytest.mark.parametrize("name", list(ZOO))
def test_building_never_edits_the_spec(name):
    # qwen3_5's ModelArgs renames keys of nested dicts in place: a shared dict would change
    # the spec hash, and so the cache directory, halfway through a process.
    before = spec_hash(ZOO[name])
    random_weights(ZOO[name])
    assert spec_hash(ZOO[name]) == before


def test_a_changed_config_gets_a_new_directory():
    spec = ZOO["gemma3"]
    changed = dataclasses.replace(spec, config={**spec.config, "sliding_window": 16})
    assert model_dir_name(changed) != model_dir_name(spec)


def test_mlx_lm_load_works_offline_and_the_tokenizer_is_bytes():
    import mlx_lm

    _, tok = mlx_lm.load(str(resolve("llama")))
    assert tok.encode("hi") == [104, 105]
    text = "héllo\n\x00~ wörld"
    ids = tok.encode(text)
    assert ids == list(text.encode("utf-8"))
    assert tok.decode(ids) == text
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (BOS_ID, EOS_ID, PAD_ID)
    assert tok.eos_token_ids == {EOS_ID}


def test_resolve_rejects_an_unknown_name_and_says_what_to_pass():
    with pytest.raises(ValueError, match="pass the path of a model directory") as err:
        resolve("gemma-9000")
    assert "gemma3" in str(err.value) and "gemma2-gqa" in str(err.value)


def test_a_local_directory_fingerprints_like_its_zoo_build(tmp_path):
    copy = shutil.copytree(resolve("mamba2"), tmp_path / "my-model")
    assert resolve(str(copy)) == copy.resolve()
    loaded = load(str(copy))
    assert loaded.name == "my-model"
    assert loaded.fingerprint == PINNED["mamba2"][1]


@pytest.mark.parametrize("name", list(ZOO))
def test_load_describes_the_model(name):
    loaded = load(name)
    assert load(name) is loaded  # memoised per process
    assert loaded.dtype == ZOO[name].dtype
    assert layer_kinds(loaded) == LAYER_KINDS[name]
    assert 50_000 < param_count(loaded) < 400_000  # tiny: the CPU CI runs hundreds of cells
