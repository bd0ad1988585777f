"""Saved conversations: private files, atomic saves, listing newest first, bad files skipped."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from localrun import config
from localrun.errors import NotFound, StoreError
from localrun.tui.conversations import Conversation, ConversationStore, default_dir


def chat(model: str = "tiny:latest", *turns: str) -> Conversation:
    conv = Conversation.new(model, system="sys", options={"temperature": 0.1})
    for turn in turns:
        conv.messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": "ok"}]
    return conv


def test_default_dir_is_under_the_user_data_dir() -> None:
    assert default_dir() == config.data_dir() / "conversations"


def test_save_load_roundtrip_with_private_modes(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c")
    conv = chat("tiny:latest", "first line\nsecond line")
    path = store.save(conv)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "c").st_mode) == 0o700
    loaded = store.load(conv.id)
    assert loaded.messages == conv.messages and loaded.system == "sys" and loaded.options == {"temperature": 0.1}
    assert loaded.title == "first line"
    assert not list((tmp_path / "c").glob(".*.tmp"))


def test_list_newest_first_and_skips_unreadable(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    old, new = chat("a", "old"), chat("b", "new")
    store.save(old, now=100.0)
    store.save(new, now=200.0)
    (tmp_path / "20990101-000000-abcdef.json").write_text("{not json")
    listed = store.list()
    assert [s.title for s in listed] == ["new", "old"]
    assert listed[0].num_messages == 2 and listed[0].model == "b"
    with pytest.raises(StoreError):
        store.load("20990101-000000-abcdef")


def test_long_titles_are_shortened(tmp_path: Path) -> None:
    conv = chat("m", "x" * 200)
    assert len(conv.auto_title()) == 60 and conv.auto_title().endswith("…")
    assert Conversation.new("m").auto_title() == "(empty)"


def test_ids_cannot_escape_the_folder(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c")
    for bad in ("../../etc/passwd", "x", ""):
        with pytest.raises(NotFound):
            store.load(bad)


def test_delete(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    conv = chat("m", "bye")
    store.save(conv)
    store.delete(conv.id)
    assert store.list() == []
    with pytest.raises(NotFound):
        store.delete(conv.id)


def test_list_of_missing_folder_is_empty(tmp_path: Path) -> None:
    assert ConversationStore(tmp_path / "none").list() == []


def test_unwritable_folder_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError):
        ConversationStore(blocker / "c").save(chat("m", "x"))
