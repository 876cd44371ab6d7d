"""A byte-level tokenizer shared by every zoo model: ids 0..255 are the bytes themselves.

Built with the `tokenizers` library as a BPE with the 256 byte symbols and no merges, so
`encode("hi") == [104, 105]` and any prompt given as ids < 256 decodes back to its bytes.
Three specials follow: <|bos|> 256, <|eos|> 257, <|pad|> 258. The chat template is
ChatML's shape with these specials (a turn: <|bos|>, the role, a newline, the text,
<|eos|>, a newline), so a chat reply ends on the model's EOS. `mlx_lm.load(dir)` reads
`tokenizer.json` + `tokenizer_config.json` through transformers, offline.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
BOS_ID, EOS_ID, PAD_ID = 256, 257, 258
NUM_BYTES = 256

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|bos|>' + message['role'] + '\n' + message['content'] + '<|eos|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|bos|>assistant\n' }}{% endif %}"
)


def byte_to_char() -> dict[int, str]:
    """GPT-2's `bytes_to_unicode`: the printable char that ByteLevel emits for each byte.

    Printable latin-1 bytes stand for themselves; the other 68 map to U+0100.. in order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table, extra = {}, 0
    for b in range(NUM_BYTES):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(NUM_BYTES + extra)
            extra += 1
    return table


def build_tokenizer() -> Tokenizer:
    """The byte-level BPE: vocab {char(b): b}, no merges, then the three specials."""
    vocab = {char: b for b, char in byte_to_char().items()}
    if set(vocab) != set(pre_tokenizers.ByteLevel.alphabet()):
        raise RuntimeError("tokenizers' ByteLevel alphabet no longer matches bytes_to_unicode")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([BOS, EOS, PAD])
    return tok


def tokenizer_config() -> dict:
    """tokenizer_config.json: no BOS is prepended, so ids map 1:1 onto prompt bytes."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1 << 20,
        "chat_template": CHAT_TEMPLATE,
    }


def write_tokenizer(directory: Path) -> None:
    """Write tokenizer.json and tokenizer_config.json into `directory`."""
    tok = build_tokenizer()
    ids = [tok.token_to_id(s) for s in (BOS, EOS, PAD)]
    if ids != [BOS_ID, EOS_ID, PAD_ID]:
        raise RuntimeError(f"special token ids came out {ids}, expected 256, 257, 258")
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(), indent=2, sort_keys=True) + "\n"
    )
