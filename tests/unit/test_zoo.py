"""The zoo: pinned weights, deterministic atomic builds, loading, and one forward each.

Builds go to a temporary cache (all the models build in about two seconds on 2 cores).
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
    resolve,
    spec_hash,
)
from batchlab.zoo.build import REQUIRED_FILES
from batchlab.zoo.load import logical_param_count
from batchlab.zoo.tokenizer import BOS_ID, EOS_ID, PAD_ID
from batchlab.zoo.weights import random_weights

# name -> (directory name = name + build hash, weight fingerprint). A failure here means a
# spec, the weight recipe, the tokenizer files, mlx-lm's parameter layout or MLX's RNG
# changed. If intended: when weights.py changed, bump build.RECIPE_VERSION, when
# tokenizer.py did, build.TOKENIZER_VERSION (or caches keep old bytes under the old name);
# pin the new values; after a weights or config change regenerate that model's goldens.
PINNED = {
    "llama": ("llama-d7e15194794a", "bdd513fd0c57778e"),
    "llama-flat": ("llama-flat-1f2cdd41c037", "3f8383a5590de0d0"),
    "qwen3": ("qwen3-ab5211d2ac49", "f52646f080561096"),
    "minicpm": ("minicpm-14c62e8cff99", "85f5e7b462ad9131"),
    "gemma3": ("gemma3-99827d60135c", "487d922d966c37b5"),
    "gemma4-12b": ("gemma4-12b-5e5b840589b8", "3331c7538ca68bce"),
    "gemma4-e4b": ("gemma4-e4b-da02a4a30c1c", "ced277338ff813ed"),
    "gemma4-26b": ("gemma4-26b-0578e8e22c71", "ca417a72350084d5"),
    "qwen3-moe": ("qwen3-moe-719a11147a8f", "7451fb148b4a4fde"),
    "gpt-oss": ("gpt-oss-61e47fa860a3", "7fe98d11baf9eb0b"),
    "qwen3.5": ("qwen3.5-f1fa8c8fbe29", "3290883ff77a8d78"),
    "mamba2": ("mamba2-6849443bf730", "44e29150f48a501f"),
    "lfm2": ("lfm2-62c07efd861a", "cd0d40f6bce95f29"),
    "falcon-h1": ("falcon-h1-2cb8a1a251a8", "dffd68039192dbb5"),
    "baichuan-m1": ("baichuan-m1-19c90312669d", "33e930087f63ea1e"),
    "llama-hd64": ("llama-hd64-248967af45c8", "8787d13c0da47e20"),
    "qwen3-hd128": ("qwen3-hd128-4c19c5439911", "d33caac049c2c77d"),
    "gemma3-hd64": ("gemma3-hd64-04d367a10957", "e91ce8cbe1592d8d"),
    "qwen3-moe-hd64": ("qwen3-moe-hd64-98135418bfb8", "41ab2bf5ff848a98"),
    "gemma2-gqa": ("gemma2-gqa-73d798a176c2", "cdcd680f3e37fa59"),
    "llama-hd96": ("llama-hd96-4730fd8d5f9b", "f933eeed3b808267"),
    "llama-q4": ("llama-q4-18df8e484bf1", "fefef254fc0c162f"),
    "nemotron-h": ("nemotron-h-80bf97025f73", "79e614e105949ee4"),
    "deepseek-v3": ("deepseek-v3-dc4d74900d8a", "5c0673bf536fb728"),
    "kimi-linear": ("kimi-linear-dfab6de9c010", "c2ed06db87cb309e"),
    "rwkv7": ("rwkv7-2328e6080a25", "bb51b9c1acdd0885"),
    # zoo3
    "ministral3": ("ministral3-83e401aa1a38", "8763b569fdfc38ac"),
    "llama-g4": ("llama-g4-c26bb2f49fd1", "505b3fae4a2c27e6"),
    "qwen3-mqa": ("qwen3-mqa-d54461bda934", "fdfdaead32a89c62"),
    "phi3": ("phi3-f1afc1ad9a69", "fd296c536b4cc863"),
    "llama-dynamic": ("llama-dynamic-4508822ef7f3", "d99d763b9a7cc296"),
    "gpt2": ("gpt2-42d3b32bb98b", "331386a49d14fbab"),
    "gpt-bigcode": ("gpt-bigcode-14a089106b58", "536c228b31b1ac4f"),
    "exaone4": ("exaone4-30ae4b947108", "9de7a34c8ef35862"),
    "cohere2": ("cohere2-c19da525fbb3", "4a3c82daa58ad1f1"),
    "granite-hybrid": ("granite-hybrid-56a53d501b9a", "95051960a6fc9242"),
    "afm7": ("afm7-f9bf21a4998f", "e2187881c5744c98"),
    "llama-mha": ("llama-mha-166337248bf4", "6abc3e17b6b03b67"),
    "llama-h32": ("llama-h32-d3915d49d210", "6c846ec7ce84d630"),
    "qwen3-h32": ("qwen3-h32-c9bfacc95ac6", "933f43ca3fe7795f"),
}

# name -> the stamp goldens carry (batchlab.golden.check.model_fingerprint): weights plus a
# digest of config.json. Tokenizer files stay out of it, so a tokenizer change (the chat
# template, TOKENIZER_VERSION 2) rebuilds the cache without staling a golden; a failure
# here means config.json changed, and every golden of that model is STALE.
GOLDEN_STAMPS = {
    "llama": "bdd513fd0c57778e+cfgd7336b30",
    "llama-flat": "3f8383a5590de0d0+cfge7b44e94",
    "qwen3": "f52646f080561096+cfgbebbff16",
    "minicpm": "85f5e7b462ad9131+cfgdcf01888",
    "gemma3": "487d922d966c37b5+cfgf397700e",
    "gemma4-12b": "3331c7538ca68bce+cfgad81bbdb",
    "gemma4-e4b": "ced277338ff813ed+cfg1bb0dbe9",
    "gemma4-26b": "ca417a72350084d5+cfgb2a73f37",
    "qwen3-moe": "7451fb148b4a4fde+cfg13391f7f",
    "gpt-oss": "7fe98d11baf9eb0b+cfga9ec6921",
    "qwen3.5": "3290883ff77a8d78+cfg2ce21988",
    "mamba2": "44e29150f48a501f+cfg5cc04e9a",
    "lfm2": "cd0d40f6bce95f29+cfga6ec3602",
    "falcon-h1": "dffd68039192dbb5+cfgb65b4d33",
    "baichuan-m1": "33e930087f63ea1e+cfg29d71095",
    "llama-hd64": "8787d13c0da47e20+cfg48e16771",
    "qwen3-hd128": "d33caac049c2c77d+cfga7143209",
    "gemma3-hd64": "e91ce8cbe1592d8d+cfg50371ad8",
    "qwen3-moe-hd64": "41ab2bf5ff848a98+cfg6e909b4d",
    "gemma2-gqa": "cdcd680f3e37fa59+cfg06baf760",
    "llama-hd96": "f933eeed3b808267+cfge4ae094c",
    "llama-q4": "fefef254fc0c162f+cfg4a44feba",
    "nemotron-h": "79e614e105949ee4+cfgad89ce47",
    "deepseek-v3": "5c0673bf536fb728+cfg4e653170",
    "kimi-linear": "c2ed06db87cb309e+cfgdbf544d7",
    "rwkv7": "bb51b9c1acdd0885+cfg9d3e8c2a",
    # zoo3
    "ministral3": "8763b569fdfc38ac+cfgd0a61f92",
    "llama-g4": "505b3fae4a2c27e6+cfg9f3a3eab",
    "qwen3-mqa": "fdfdaead32a89c62+cfgc9961152",
    "phi3": "fd296c536b4cc863+cfg2182ae2f",
    "llama-dynamic": "d99d763b9a7cc296+cfgb96d21da",
    "gpt2": "331386a49d14fbab+cfga91a6326",
    "gpt-bigcode": "536c228b31b1ac4f+cfg3aaf2601",
    "exaone4": "9de7a34c8ef35862+cfg415d67fb",
    "cohere2": "4a3c82daa58ad1f1+cfg8a4352e4",
    "granite-hybrid": "95051960a6fc9242+cfg1cff165e",
    "afm7": "e2187881c5744c98+cfg3b0e57cd",
    "llama-mha": "6abc3e17b6b03b67+cfg11d4da65",
    "llama-h32": "6c846ec7ce84d630+cfge8a0091b",
    "qwen3-h32": "933f43ca3fe7795f+cfg1099d556",
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
    "falcon-h1": "list(ssm,full)×2",
    "baichuan-m1": "list(ssm,sliding8) list(ssm,full)",
    "llama-hd64": "full×2",
    "qwen3-hd128": "full×2",
    "gemma3-hd64": "sliding8×2 full×2",
    "qwen3-moe-hd64": "full×2 +moe",
    "gemma2-gqa": "full×2",
    "llama-hd96": "full",
    "llama-q4": "full×2",
    "nemotron-h": "ssm full +moe",
    "deepseek-v3": "full×2 +mla",
    "kimi-linear": "ssm×2 full +mla",
    "rwkv7": "ssm×2",
    # zoo3
    "ministral3": "sliding8 full",
    "llama-g4": "full×2",
    "qwen3-mqa": "full×2",
    "phi3": "full×2",
    "llama-dynamic": "full×2",
    "gpt2": "full×2",
    "gpt-bigcode": "full×2",
    "exaone4": "sliding8×3 full",
    "cohere2": "sliding8×3 full",
    "granite-hybrid": "ssm×2 full +moe",
    "afm7": "full×2",
    "llama-mha": "full×2",
    "llama-h32": "full×2",
    "qwen3-h32": "full",
}


pytestmark = pytest.mark.usefixtures("private_zoo_cache")


@pytest.fixture(scope="module")
def zoo_cache(private_zoo_cache):
    return private_zoo_cache


def test_every_zoo_model_is_pinned():
    assert list(PINNED) == list(ZOO)
    assert list(LAYER_KINDS) == list(ZOO)
    assert list(GOLDEN_STAMPS) == list(ZOO)


@pytest.mark.parametrize("name", list(ZOO))
def test_the_golden_stamp_ignores_the_tokenizer_files(name):
    from batchlab.golden.check import model_fingerprint

    assert model_fingerprint.__wrapped__(name) == GOLDEN_STAMPS[name]


def test_a_tokenizer_change_renames_the_directory_but_not_config_json(monkeypatch):
    import importlib

    build_module = importlib.import_module("batchlab.zoo.build")  # `zoo.build` is the function

    spec = ZOO["llama"]
    before_dir, before_config = model_dir_name(spec), build_module.model_config(spec)
    monkeypatch.setattr(build_module, "TOKENIZER_VERSION", build_module.TOKENIZER_VERSION + 1)
    assert model_dir_name(spec) != before_dir
    assert build_module.model_config(spec) == before_config


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


def test_every_zoo_model_chats_through_its_byte_template():
    import mlx_lm

    _, tok = mlx_lm.load(str(resolve("gemma3")))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True)
    assert list(ids) == [BOS_ID, *b"system\nBe brief.", EOS_ID, 10,
                         BOS_ID, *b"user\nhi", EOS_ID, 10, BOS_ID, *b"assistant\n"]  # fmt: skip
    text = tok.apply_chat_template(messages[1:], add_generation_prompt=False, tokenize=False)
    assert text == "<|bos|>user\nhi<|eos|>\n"


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
    # tiny: the CPU CI runs hundreds of cells (weights as the checkpoint counts them); the
    # real head counts of the CUDA repeat gate cost 64 x 32 heads of 64 or 128 a projection
    limit = 800_000 if name in ("llama-h32", "qwen3-h32") else 400_000
    assert 50_000 < logical_param_count(loaded) < limit


def test_zoo_list_stays_readable_at_80_columns(monkeypatch, capsys):
    from batchlab.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["zoo", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    llama = next(i for i, line in enumerate(lines) if line.startswith("llama "))
    assert lines[llama].split() == ["llama", "bfloat16", "94,528", "bdd513fd0c57778e"]
    assert lines[llama + 1].strip().startswith("llama; full×2; Llama 3.x")


def test_a_quantized_spec_builds_a_checkpoint_that_mlx_lm_loads_quantized():
    loaded = load("llama-q4")
    kinds = {type(m).__name__ for _, m in loaded.model.named_modules()}
    assert {"QuantizedLinear", "QuantizedEmbedding"} <= kinds
    assert not kinds & {"Linear", "Embedding"}  # every projection and the tied head
    assert loaded.config["quantization"] == {"group_size": 32, "bits": 4}
