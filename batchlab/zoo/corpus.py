"""Real English prose for teacher-forced measurements, sliced by token offset and length.

    corpus_prompt("smollm2-135m", offset=1000, length=512) -> 512 ids of real text
    corpus_tokens("smollm2-135m")  -> the whole corpus in that model's tokens (32,946)
    corpus_pieces()                -> (title, origin, license, text) of each piece

`corpus.toml` (beside this file) holds the pieces verbatim with their provenance: license
texts, the Python Language Reference topics and essays that the installed packages ship.
The corpus is the pieces joined by a blank line, tokenized in one call (no specials added),
so a slice is the same ids on every machine with the same tokenizer files.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CORPUS_FILE = Path(__file__).with_name("corpus.toml")


@dataclass(frozen=True, slots=True, kw_only=True)
class CorpusPiece:
    title: str
    origin: str  # the installed file it was copied from
    license: str  # SPDX id
    text: str


@functools.cache
def corpus_pieces() -> tuple[CorpusPiece, ...]:
    with open(CORPUS_FILE, "rb") as f:
        data = tomllib.load(f)
    # A TOML multi-line string ends with the newline before its closing quotes: not text.
    return tuple(CorpusPiece(**{**piece, "text": piece["text"].removesuffix("\n")})
                 for piece in data["piece"])  # fmt: skip


def corpus_text() -> str:
    return "\n\n".join(piece.text for piece in corpus_pieces())


@functools.cache
def corpus_tokens(model: str) -> tuple[int, ...]:
    """The whole corpus as `model`'s token ids (its own tokenizer, no BOS/EOS added)."""
    from batchlab.zoo.text import tokenizer_for

    tokenizer = tokenizer_for(model)
    if tokenizer is None:
        raise ValueError(f"model {model!r} has no tokenizer files; corpus prompts need one")
    # The backend (`tokenizers`) encodes the same ids as the transformers wrapper, without
    # its warning that 32k tokens exceed the model's context.
    backend = getattr(tokenizer._tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return tuple(backend.encode(corpus_text(), add_special_tokens=False).ids)
    return tuple(tokenizer.encode(corpus_text(), add_special_tokens=False))


def corpus_prompt(model: str, offset: int, length: int) -> tuple[int, ...]:
    """`length` ids of the corpus from token `offset`, in `model`'s tokenizer."""
    tokens = corpus_tokens(model)
    if offset < 0 or length < 1 or offset + length > len(tokens):
        raise ValueError(
            f"corpus slice [{offset}, {offset + length}) is outside the corpus, which is "
            f"{len(tokens)} tokens long for {model!r}; choose offset >= 0, length >= 1, "
            f"offset + length <= {len(tokens)}"
        )
    return tokens[offset : offset + length]
