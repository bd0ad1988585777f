"""Whole-vocabulary scans (native.Vocab): the same answers as asking token by token, kept on disk
between loads of a model (engine/vocab_store.py)."""

from __future__ import annotations

import codecs
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import vocab_of

from localrun.engine import native, vocab_store
from localrun.engine.engine import Engine
from localrun.engine.types import LoadOptions, PrefixCacheLocation
from localrun.engine.vocab_store import VocabStore


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


def scan_all(vocab: native.Vocab) -> native.VocabScans:
    vocab.special_tokens(), vocab.broken_utf8_tokens(), vocab.eog_ids()
    return vocab.scans()


def same_scans(a: native.VocabScans, b: native.VocabScans) -> bool:
    assert a.specials is not None and b.specials is not None and a.utf8 is not None and b.utf8 is not None
    assert a.eog is not None and b.eog is not None
    return (a.specials == b.specials and a.utf8[0].tolist() == b.utf8[0].tolist() and a.utf8[1] == b.utf8[1]
            and a.eog.tolist() == b.eog.tolist())


def no_scanning(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("_scan_specials", "_scan_utf8"):
        monkeypatch.setattr(native.Vocab, name, lambda self: pytest.fail("scanned again"))


def store_at(directory: Path, fingerprint: str = "1:abc") -> VocabStore:
    return VocabStore(directory, "sha256-0123", fingerprint)


def test_scans_saved_for_a_model_come_back_without_scanning(tiny_gguf: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_at(tmp_path)
    for vocab in vocab_of(tiny_gguf):
        assert not vocab_store.save(store, vocab, native.VocabScans())  # nothing scanned: nothing written
        assert not store.path.exists()
        scanned = scan_all(vocab)
        assert vocab_store.save(store, vocab, native.VocabScans())
    no_scanning(monkeypatch)
    for vocab in vocab_of(tiny_gguf):
        restored = vocab_store.restore(store, vocab)
        assert restored.known() == {"specials", "utf8", "eog"}
        assert same_scans(scan_all(vocab), scanned)
        store.path.unlink()
        assert not vocab_store.save(store, vocab, restored)  # nothing new since: not written again


@pytest.mark.parametrize("damage", ["garbage", "other model", "ids out of range", "truncated"])
def test_a_damaged_or_foreign_scan_file_is_ignored(tiny_gguf: Path, tmp_path: Path, damage: str) -> None:
    store = store_at(tmp_path)
    for vocab in vocab_of(tiny_gguf):
        scanned = scan_all(vocab)
        if damage == "other model":
            vocab_store.save(store_at(tmp_path, "2:def"), vocab, native.VocabScans())
        else:
            vocab_store.save(store, vocab, native.VocabScans())
    if damage == "garbage":
        store.path.write_bytes(b"not a zip file at all")
    elif damage == "truncated":
        store.path.write_bytes(store.path.read_bytes()[:200])
    elif damage == "ids out of range":
        with np.load(store.path) as data:
            arrays = {name: data[name] for name in data.files}
        arrays["eog"] = np.array([10**9], dtype=np.int64)
        with store.path.open("wb") as f:
            np.savez(f, allow_pickle=False, **arrays)
    for vocab in vocab_of(tiny_gguf):
        assert vocab_store.restore(store, vocab).known() == set()
        assert same_scans(scan_all(vocab), scanned)  # scanned on demand instead


def test_an_engine_keeps_its_scans_between_loads(tiny_gguf: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    location = PrefixCacheLocation(str(tmp_path), "sha256-0123")
    options = LoadOptions(num_ctx=512, num_parallel=2, num_batch=64)
    with Engine(str(tiny_gguf), options, prefix_cache=location) as engine:
        scanned = scan_all(engine.vocab)
    no_scanning(monkeypatch)
    with Engine(str(tiny_gguf), options, prefix_cache=location) as engine:
        assert engine.vocab.scans().known() == {"specials", "utf8", "eog"}
        assert same_scans(engine.vocab.scans(), scanned)


def test_a_scan_file_that_cannot_be_written_leaves_nothing_behind(tiny_gguf: Path, tmp_path: Path) -> None:
    store = store_at(tmp_path / "cache")
    store.path.mkdir(parents=True)  # a directory where the file goes
    for vocab in vocab_of(tiny_gguf):
        scan_all(vocab)
        assert vocab_store.restore(store, vocab).known() == set()  # unreadable: ignored
        with pytest.raises(OSError):
            vocab_store.save(store, vocab, native.VocabScans())
    assert [p.name for p in store.directory.iterdir()] == [store.path.name]  # no temporary file left
