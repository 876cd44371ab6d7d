"""The real-text corpus: provenance per piece, size, and slices by token offset."""

import hashlib

import pytest

from batchlab.zoo.chat import chat_messages, chat_prompt
from batchlab.zoo.corpus import corpus_pieces, corpus_prompt, corpus_text, corpus_tokens

# Pinned: the corpus text and its ids in two tokenizers. A change means corpus.toml or a
# tokenizer changed: goldens made on corpus slices of that model are then STALE.
TEXT_SHA256 = "23344f7a0b7ae16853a698d87f9936aa32e06d697ed0e25344e421f051a4ae0a"
SMOLLM2_TOKENS = 32946
ZOO_BYTES = 138001


def test_every_piece_says_where_it_came_from_and_under_which_license():
    pieces = corpus_pieces()
    assert len(pieces) == 19
    assert {p.license for p in pieces} == {"Apache-2.0", "PSF-2.0", "BSD-3-Clause"}
    for piece in pieces:
        assert piece.title and piece.origin and len(piece.text) > 300
        assert piece.text == piece.text.strip("\n")  # joined by exactly one blank line


def test_the_text_is_pinned():
    assert hashlib.sha256(corpus_text().encode()).hexdigest() == TEXT_SHA256


def test_the_corpus_is_at_least_20k_tokens_of_the_real_tokenizer():
    tokens = corpus_tokens("smollm2-135m")
    assert len(tokens) == SMOLLM2_TOKENS
    assert hashlib.sha256(str(tokens).encode()).hexdigest()[:16] == "a4f37c913bb329e8"


def test_on_a_byte_model_the_corpus_is_its_utf8_bytes():
    tokens = corpus_tokens("llama")
    assert len(tokens) == ZOO_BYTES
    assert bytes(tokens) == corpus_text().encode("utf-8")


def test_a_slice_is_the_tokens_at_that_offset():
    assert corpus_prompt("smollm2-135m", 0, 10) == (
        12427, 16797, 6966, 16299, 13867, 216, 34, 30, 32, 28)  # "Apache License\n Version 2.0,"
    assert corpus_prompt("smollm2-135m", 20000, 10) == corpus_tokens("smollm2-135m")[20000:20010]
    at = corpus_text().index("Apache License")
    assert corpus_prompt("llama", at, 14) == tuple(b"Apache License")


@pytest.mark.parametrize(("offset", "length"), [(-1, 4), (0, 0), (32940, 7)])
def test_a_slice_outside_the_corpus_is_refused_with_its_size(offset, length):
    with pytest.raises(ValueError, match="32946 tokens long for 'smollm2-135m'"):
        corpus_prompt("smollm2-135m", offset, length)


def test_chat_messages_take_text_or_role_content_pairs():
    assert chat_messages("hi") == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="role"):
        chat_messages([{"user": "hi"}])
    with pytest.raises(ValueError, match="at least one"):
        chat_messages([])


def test_a_chat_prompt_on_a_byte_model_is_the_template_in_bytes():
    system = {"role": "system", "content": "Be brief."}
    assert chat_prompt("llama", [system, {"role": "user", "content": "hi"}]) == (
        256, *b"system\nBe brief.", 257, 10, 256, *b"user\nhi", 257, 10, 256, *b"assistant\n")


def test_a_system_turn_replaces_smollm2s_default_one():
    short = chat_prompt("smollm2-135m", [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "What is 2+2?"}])
    assert short[:4] == (1, 9690, 198, 6077)  # <|im_start|>system\nBe ...
    assert short[-4:] == (1, 520, 9531, 198)  # <|im_start|>assistant\n
    assert len(short) == 24  # the default system turn alone is 19 tokens
