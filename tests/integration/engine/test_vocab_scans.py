"""Whole-vocabulary scans (native.Vocab): the same answers as asking token by token."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest
from engine_helpers import vocab_of

from localrun.engine import native


def utf8_classes_one_by_one(vocab: native.Vocab) -> tuple[list[int], list[int]]:
    """The plain definition: a token is broken when its piece cannot follow a whole character, and a
    continuation when its piece starts with a continuation byte."""
    broken, continuation = [], []
    for token in range(vocab.n_vocab):
        piece = vocab.piece(token)
        if piece and piece[0] & 0xC0 == 0x80:
            continuation.append(token)
        try:
            codecs.getincrementaldecoder("utf-8")("strict").decode(piece, final=False)
        except UnicodeDecodeError:
            broken.append(token)
    return broken, continuation


def check_utf8_classes(path: Path) -> None:
    for scanned in vocab_of(path):
        broken, continuation = scanned.broken_utf8_tokens().tolist(), scanned.continuation_tokens()
        for asked in vocab_of(path):
            assert (broken, continuation) == utf8_classes_one_by_one(asked)
            assert all(scanned.piece(t) == asked.piece(t) for t in range(0, asked.n_vocab, 97))
        assert broken and continuation  # byte-level pieces exist in every vocabulary here


def test_the_tiny_vocabularys_utf8_classes_are_the_token_by_token_ones(tiny_gguf: Path) -> None:
    check_utf8_classes(tiny_gguf)


@pytest.mark.starter
def test_qwens_utf8_classes_are_the_token_by_token_ones(starter_models: Path) -> None:
    check_utf8_classes(max((starter_models / "blobs").iterdir(), key=lambda p: p.stat().st_size))


@pytest.mark.starter
def test_gemmas_utf8_classes_are_the_token_by_token_ones(gemma_gguf: Path) -> None:
    check_utf8_classes(gemma_gguf)
