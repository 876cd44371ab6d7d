"""GGUF import: a tiny llama GGUF written here with `mx.save_gguf`, converted and checked.

The file is made the way llama.cpp's converter makes one from a Hugging Face checkpoint:
Q and K rows permuted into the interleaved RoPE order, names `blk.N.attn_q.weight`, the
tokenizer as `tokenizer.ggml.*` metadata. Its import must compute what the original
(half-split RoPE) model computes; the refusals must name what they refuse.
"""

import json
import struct

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models import llama

from batchlab.commands.zoo import import_gguf
from batchlab.gguf.convert import llama_config, load_gguf, mlx_lm_name, quantization
from batchlab.gguf.header import GGUFError, read_gguf_header
from batchlab.zoo.tokenizer import byte_to_char

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, FFN, LAYERS = 4, 2, 16, 64, 128, 2
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BYTES = [byte_to_char()[b] for b in range(256)]
MERGES = ["h e", "Ġ t", "Ġt he"]
TOKENS = SPECIALS + BYTES + ["he", "Ġt", "Ġthe"]
VOCAB = len(TOKENS)  # 262
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n" \
           "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"


def hf_weights() -> dict[str, mx.array]:
    """A random llama in Hugging Face (mlx-lm) names and RoPE order, float32."""
    args = llama.ModelArgs(
        model_type="llama", hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        intermediate_size=FFN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM, rms_norm_eps=1e-5, vocab_size=VOCAB, rope_theta=10000.0,
        tie_word_embeddings=False,
    )  # fmt: skip
    model = llama.Model(args)
    keys = mx.random.split(mx.random.key(7), 64)
    from mlx.utils import tree_flatten

    flat = dict(tree_flatten(model.parameters()))
    return {
        name: (mx.random.uniform(-0.2, 0.2, p.shape, key=keys[i]) + (1.0 if "norm" in name else 0))
        for i, (name, p) in enumerate(sorted(flat.items()))
    }


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute: half-split rows -> interleaved."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_TO_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
            "self_attn.v_proj": "attn_v",
            "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
            "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
            "post_attention_layernorm": "ffn_norm"}  # fmt: skip


def gguf_tensors(hf: dict[str, mx.array]) -> dict[str, mx.array]:
    out = {}
    for name, w in hf.items():
        if name.startswith("model.layers."):
            _, _, n, *rest = name.split(".")
            module, leaf = ".".join(rest[:-1]), rest[-1]
            array = np.array(w)
            if module == "self_attn.q_proj":
                array = _permute(array, HEADS)
            elif module == "self_attn.k_proj":
                array = _permute(array, KV_HEADS)
            out[f"blk.{n}.{_TO_GGUF[module]}.{leaf}"] = mx.array(array)
        else:
            gguf = {"model.embed_tokens": "token_embd", "model.norm": "output_norm",
                    "lm_head": "output"}[name.rsplit(".", 1)[0]]  # fmt: skip
            out[f"{gguf}.weight"] = w
    # Two tensors in F16, as a mixed-precision GGUF has them.
    for name in ("blk.1.ffn_up.weight", "output.weight"):
        out[name] = out[name].astype(mx.float16)
    return out


def u32(v):
    return mx.array(v, dtype=mx.uint32)


def gguf_metadata(**overrides) -> dict:
    md = {
        "general.architecture": "llama", "general.name": "tiny",
        "llama.embedding_length": u32(HIDDEN), "llama.block_count": u32(LAYERS),
        "llama.feed_forward_length": u32(FFN), "llama.attention.head_count": u32(HEADS),
        "llama.attention.head_count_kv": u32(KV_HEADS), "llama.rope.dimension_count": u32(HEAD_DIM),
        "llama.attention.layer_norm_rms_epsilon": mx.array(1e-5, dtype=mx.float32),
        "llama.rope.freq_base": mx.array(10000.0, dtype=mx.float32),
        "llama.context_length": u32(2048),
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": TOKENS, "tokenizer.ggml.merges": MERGES,
        "tokenizer.ggml.token_type": mx.array([3, 3, 3] + [1] * (VOCAB - 3), dtype=mx.int32),
        "tokenizer.ggml.bos_token_id": u32(1), "tokenizer.ggml.eos_token_id": u32(2),
        "tokenizer.ggml.add_bos_token": mx.array(False), "tokenizer.chat_template": TEMPLATE,
    }  # fmt: skip
    md.update(overrides)
    return md


@pytest.fixture(scope="module")
def hf():
    return hf_weights()


@pytest.fixture
def gguf_file(tmp_path, hf):
    path = tmp_path / "Tiny-Llama.F32.gguf"
    mx.save_gguf(str(path), gguf_tensors(hf), gguf_metadata())
    return path


def test_names_map_onto_mlx_lm_llama():
    assert mlx_lm_name("token_embd.weight") == "model.embed_tokens.weight"
    assert mlx_lm_name("blk.12.attn_output.scales") == "model.layers.12.self_attn.o_proj.scales"
    assert mlx_lm_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    assert mlx_lm_name("output.weight") == "lm_head.weight"
    with pytest.raises(GGUFError, match="ffn_gate_exps"):
        mlx_lm_name("blk.0.ffn_gate_exps.weight")


def test_the_header_reader_sees_every_tensor_type(gguf_file):
    header = read_gguf_header(gguf_file)
    assert header.architecture == "llama"
    assert len(header.tensor_types) == 2 * 9 + 3
    assert header.tensor_types["blk.1.ffn_up.weight"] == "F16"
    assert header.tensor_types["blk.0.attn_q.weight"] == "F32"
    assert header.scalars["llama.block_count"] == LAYERS
    assert header.unsupported_tensors() == {}


def test_config_is_llama_with_traditional_rope(gguf_file):
    weights, metadata = load_gguf(gguf_file)
    config = llama_config(metadata, weights)
    assert config == {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_traditional": True,
        "vocab_size": 262, "max_position_embeddings": 2048, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
        "pad_token_id": 2, "torch_dtype": "float32", "dtype": "float32",
    }  # fmt: skip
    assert quantization(weights) is None  # a float file gets no quantization block


def test_quantization_block_takes_the_commonest_width_and_lists_the_rest():
    packed = {  # (out, in * bits / 32) words, (out, in / 32) scales: in = 64
        "a.weight": mx.zeros((8, 8), dtype=mx.uint32), "a.scales": mx.zeros((8, 2)),
        "b.weight": mx.zeros((8, 8), dtype=mx.uint32), "b.scales": mx.zeros((8, 2)),
        "e.weight": mx.zeros((8, 16), dtype=mx.uint32), "e.scales": mx.zeros((8, 2)),
    }  # fmt: skip
    assert quantization(packed) == {"group_size": 32, "bits": 4, "e": {"group_size": 32, "bits": 8}}


def test_import_computes_what_the_original_model_computes(gguf_file, hf, tmp_path):
    """Interleaved Q/K rows + rope_traditional == half-split rows + default RoPE."""
    import mlx_lm

    target = import_gguf(gguf_file, root=tmp_path / "zoo")
    assert target.name.startswith("tiny-llama.f32-")
    model, _ = mlx_lm.load(str(target))
    reference = llama.Model(llama.ModelArgs.from_dict(
        {**json.loads((target / "config.json").read_text()), "rope_traditional": False}))
    reference.load_weights(list(hf.items()))
    reference.lm_head.weight = reference.lm_head.weight.astype(mx.float16)
    reference.model.layers[1].mlp.up_proj.weight = (
        reference.model.layers[1].mlp.up_proj.weight.astype(mx.float16))
    ids = mx.array([[1, 72, 105, 259, 9, 200, 35, 261, 2, 17, 3, 150]])
    got, want = model(ids), reference(ids)
    assert got.shape == (1, 12, VOCAB)
    # Same math in another summation order (the rotated pairs sit elsewhere in the dot
    # product), so equal to float32 rounding, not bit for bit: this is a conversion check.
    assert mx.allclose(got, want, atol=1e-4, rtol=1e-4).item()
    # and it is the RoPE order that makes them agree: the unconverted order is far off
    wrong = llama.Model(llama.ModelArgs.from_dict(json.loads((target / "config.json").read_text())))
    wrong.load_weights(list(hf.items()))
    assert not mx.allclose(wrong(ids), want, atol=1e-2).item()


def test_the_tokenizer_is_the_ggufs_bpe_with_its_template(gguf_file, tmp_path):
    import mlx_lm

    _, tok = mlx_lm.load(str(import_gguf(gguf_file, root=tmp_path / "zoo")))
    # "the" -> t + he (no "t he" merge); " then" -> Ġthe + n (merges ranked h e < Ġ t < Ġt he)
    assert tok.encode("the then", add_special_tokens=False) == [3 + 116, 259, 261, 3 + 110]
    assert tok.decode([3 + 116, 259, 261, 3 + 110]) == "the then"
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert list(ids) == [1, *(3 + b for b in b"user\nhi"), 2, 3 + 10, 1,
                         *(3 + b for b in b"assistant\n")]  # fmt: skip
    assert tok.encode("<|im_end|>", add_special_tokens=False) == [2]  # a special, never split


def test_a_second_import_reuses_the_directory(gguf_file, tmp_path):
    first = import_gguf(gguf_file, name="tiny", root=tmp_path / "zoo")
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert import_gguf(gguf_file, name="tiny", root=tmp_path / "zoo") == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in (tmp_path / "zoo").iterdir()] == [first.name]


def _retype(path, tensor: str, ggml_type: int) -> None:
    """Rewrite one tensor's ggml type id in the file's header (name, n_dims, dims, type)."""
    data = bytearray(path.read_bytes())
    name = tensor.encode()
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    (n_dims,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, ggml_type)
    path.write_bytes(bytes(data))


def test_a_k_quant_tensor_is_refused_by_name(gguf_file, tmp_path):
    _retype(gguf_file, "blk.0.ffn_down.weight", 14)  # Q6_K
    assert read_gguf_header(gguf_file).unsupported_tensors() == {"blk.0.ffn_down.weight": "Q6_K"}
    refusal = r"1 tensor\(s\) of type Q6_K \(e.g. blk.0.ffn_down.weight\)"
    with pytest.raises(GGUFError, match=refusal):
        import_gguf(gguf_file, root=tmp_path / "zoo")
    assert not (tmp_path / "zoo").exists() or not any((tmp_path / "zoo").iterdir())


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"general.architecture": "gpt2"}, "general.architecture is 'gpt2'"),
        ({"tokenizer.ggml.model": "llama"}, "only byte-level BPE"),
        ({"tokenizer.ggml.pre": "deepseek-coder"}, "knows the split rules"),
        ({"llama.rope.dimension_count": u32(8)}, "RoPE covers 8 of 16"),
    ],
)
def test_other_ggufs_are_refused_with_the_reason(tmp_path, hf, metadata, message):
    path = tmp_path / "other.gguf"
    mx.save_gguf(str(path), gguf_tensors(hf), gguf_metadata(**metadata))
    with pytest.raises(GGUFError, match=message):
        import_gguf(path, root=tmp_path / "zoo")
    assert [p.name for p in (tmp_path / "zoo").iterdir()] == []  # the temp dir is gone


def test_the_cli_imports_and_refuses_cleanly(gguf_file, tmp_path, monkeypatch, capsys):
    from batchlab.cli import main

    monkeypatch.setenv("BATCHLAB_CACHE", str(tmp_path / "cache"))
    assert main(["zoo", "import", str(gguf_file), "--name", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "2 layers, float32" in out and "use it as --model" in out
    assert main(["zoo", "import", str(tmp_path / "missing.gguf")]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "no such file; pass the path of a .gguf file" in out


def _blocks(values: np.ndarray, ggml_type: str) -> tuple[bytes, np.ndarray]:
    """ggml's block encoding of `values` (rows of 32-value blocks) and what it decodes to.

    Q8_0: f16 d, 32 int8 q; x = q d. Q4_0: f16 d, 16 bytes of nibbles (byte j holds values
    j and j + 16); x = (q - 8) d. Q4_1: f16 d, f16 m, nibbles; x = q d + m.
    """
    out, decoded = bytearray(), []
    for block in values.reshape(-1, 32).astype(np.float32):
        if ggml_type == "Q8_0":
            d = np.float16(np.abs(block).max() / 127)
            q = np.clip(np.round(block / np.float32(d)), -127, 127).astype(np.int8)
            out += d.tobytes() + q.tobytes()
            decoded.append(q.astype(np.float32) * np.float32(d))
            continue
        if ggml_type == "Q4_0":
            d, m = np.float16(np.abs(block).max() / 7), None
            q = np.clip(np.round(block / np.float32(d)) + 8, 0, 15).astype(np.uint8)
            decoded.append((q.astype(np.float32) - 8) * np.float32(d))
        else:  # Q4_1
            m = np.float16(block.min())
            d = np.float16((block.max() - np.float32(m)) / 15)
            q = np.clip(np.round((block - np.float32(m)) / np.float32(d)), 0, 15).astype(np.uint8)
            decoded.append(q.astype(np.float32) * np.float32(d) + np.float32(m))
        out += d.tobytes() + (m.tobytes() if m is not None else b"")
        out += (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
    return bytes(out), np.concatenate(decoded).reshape(values.shape)


@pytest.mark.parametrize(("ggml_type", "type_id", "bits"), [("Q8_0", 8, 8), ("Q4_0", 2, 4),
                                                            ("Q4_1", 3, 4)])  # fmt: skip
def test_block_quantized_tensors_import_as_mlx_affine_groups(gguf_file, tmp_path, ggml_type,
                                                             type_id, bits):
    """A tensor rewritten in place as ggml blocks (smaller than its F32 slot, so no other
    offset moves) comes out as an mlx-lm QuantizedLinear that decodes to the same values."""
    import mlx_lm

    name = "blk.0.ffn_gate.weight"  # (128, 64): 256 blocks of 32
    header = read_gguf_header(gguf_file)
    values = np.array(load_gguf(gguf_file)[0]["model.layers.0.mlp.gate_proj.weight"])
    encoded, decoded = _blocks(values, ggml_type)
    _retype(gguf_file, name, type_id)
    data = bytearray(gguf_file.read_bytes())
    start = header.tensor_starts[name]
    data[start : start + len(encoded)] = encoded
    gguf_file.write_bytes(bytes(data))

    target = import_gguf(gguf_file, root=tmp_path / "zoo")
    config = json.loads((target / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": bits}
    model, _ = mlx_lm.load(str(target))
    gate = model.model.layers[0].mlp.gate_proj
    assert (type(gate).__name__, gate.bits, gate.group_size) == ("QuantizedLinear", bits, 32)
    assert type(model.model.layers[0].mlp.up_proj).__name__ == "Linear"  # F32 stays F32
    weight = mx.dequantize(gate.weight, gate.scales, gate.biases, group_size=32, bits=bits)
    # MLX decodes in float16 (scale * q + bias): within 2 float16 ulps of |w| <= 0.25
    # (1.2e-4 each), far under one quantization step (Q8_0 ~1.6e-3, Q4 ~3e-2).
    error = np.abs(np.array(weight.astype(mx.float32)) - decoded)
    assert error.max() <= 2.5e-4
