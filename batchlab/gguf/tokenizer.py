"""A GGUF's tokenizer (its `tokenizer.ggml.*` metadata) as tokenizer.json + tokenizer_config.json.

GGUF keeps a byte-level BPE as its token strings (already in GPT-2's byte-to-unicode
alphabet), its merges ("Ġ t") and per-token types (3 = control: the specials); which regex
splits text before BPE is named by `tokenizer.ggml.pre`. Rebuilt with `tokenizers` the way
the model's own tokenizer.json is (SmolLM2's: Digits(individual) then ByteLevel with the
GPT-2 regex), so `mlx_lm.load(dir)` gets the same ids as the original tokenizer.

Only `tokenizer.ggml.model == "gpt2"` (byte-level BPE) is rebuilt: SentencePiece GGUFs
("llama": Llama 2, TinyLlama) store scores instead of merges, and are refused.
"""

from __future__ import annotations

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from batchlab.gguf.header import GGUFError

_CONTROL = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL

# Llama 3's split regex (its tokenizer.json), applied before a regex-free ByteLevel.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _byte_level(use_regex: bool) -> pre_tokenizers.ByteLevel:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=use_regex)


def _pre_tokenizer(pre: str):
    """The pre-tokenizer for llama.cpp's `tokenizer.ggml.pre` name."""
    if pre in ("default", "gpt-2", "gpt2"):
        return _byte_level(use_regex=True)
    if pre == "smollm":  # llama.cpp: "\p{N}" then the GPT-2 regex
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), _byte_level(use_regex=True)]
        )
    if pre in ("llama-bpe", "llama3"):
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False),
             _byte_level(use_regex=False)]
        )  # fmt: skip
    raise GGUFError(
        f"tokenizer.ggml.pre = {pre!r}: batchlab knows the split rules of 'default', 'gpt2', "
        "'smollm' and 'llama-bpe' only; add the rule in batchlab/gguf/tokenizer.py"
    )


def _int(metadata: dict, key: str) -> int | None:
    value = metadata.get(key)
    return None if value is None else int(value.item() if hasattr(value, "item") else value)


def _bool(metadata: dict, key: str, default: bool) -> bool:
    value = metadata.get(key)
    return default if value is None else bool(value.item() if hasattr(value, "item") else value)


def special_ids(metadata: dict) -> dict[str, int | None]:
    """bos / eos / pad / unk ids as the GGUF names them (pad falls back to eos)."""
    keys = {"bos": "bos", "eos": "eos", "pad": "padding", "unk": "unknown"}
    ids = {k: _int(metadata, f"tokenizer.ggml.{key}_token_id") for k, key in keys.items()}
    if ids["eos"] is None:
        raise GGUFError("the GGUF names no tokenizer.ggml.eos_token_id: generation could not stop")
    if ids["pad"] is None:
        ids["pad"] = ids["eos"]
    return ids


def build_gguf_tokenizer(metadata: dict) -> Tokenizer:
    """The `tokenizers` BPE of a byte-level GGUF vocabulary."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise GGUFError(
            f"tokenizer.ggml.model = {kind!r}: only byte-level BPE ('gpt2') vocabularies are "
            "converted; SentencePiece ('llama') GGUFs store scores, not merges"
        )
    tokens = list(metadata["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    token_types = metadata.get("tokenizer.ggml.token_type")
    types = token_types.tolist() if token_types is not None else [1] * len(tokens)
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise GGUFError("the GGUF vocabulary repeats a token string; cannot build a BPE from it")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = _pre_tokenizer(str(metadata.get("tokenizer.ggml.pre", "default")))
    tok.decoder = decoders.ByteLevel()
    # Control tokens are specials: never split, skipped by decode(skip_special_tokens=True).
    specials = [AddedToken(t, special=True, normalized=False)
                for t, kind in zip(tokens, types, strict=True) if kind == _CONTROL]  # fmt: skip
    tok.add_special_tokens(specials)
    bos = special_ids(metadata)["bos"]
    if _bool(metadata, "tokenizer.ggml.add_bos_token", default=False) and bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A {tokens[bos]} $B",
            special_tokens=[(tokens[bos], bos)],
        )  # fmt: skip
    return tok


def gguf_tokenizer_config(metadata: dict) -> dict:
    """tokenizer_config.json: the specials by name, BOS policy and the GGUF's chat template."""
    tokens = metadata["tokenizer.ggml.tokens"]
    ids = special_ids(metadata)

    def name(key: str) -> str | None:
        return None if ids[key] is None else tokens[ids[key]]

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name("bos"),
        "eos_token": name("eos"),
        "pad_token": name("pad"),
        "unk_token": name("unk"),
        "add_bos_token": _bool(metadata, "tokenizer.ggml.add_bos_token", default=False),
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": _int(metadata, "llama.context_length") or 1 << 20,
    }
    if "tokenizer.chat_template" in metadata:
        config["chat_template"] = str(metadata["tokenizer.chat_template"])
    return config
