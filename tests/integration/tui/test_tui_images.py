"""Images in the chat UI (issue #28 point 5): /image or a path dropped into the message attaches an
image, shown on the message and kept in the saved chat; a model without vision says so before
anything is sent."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from test_tui_chat import infos, make_app, type_and_send, wait_idle
from tinyvision import tiny_png_bytes
from tui_fakes import FakeBackend

from localrun.tui import attachments
from localrun.tui.conversations import ConversationStore
from localrun.tui.widgets import PromptInput, UserMessage

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def picture(tmp_path: Path) -> Path:
    folder = tmp_path / "my pictures"
    folder.mkdir()
    path = folder / "cat.png"
    path.write_bytes(tiny_png_bytes(8, 6, 1))
    return path


def dropped(path: Path) -> str:
    """``path`` as a terminal pastes a dropped file: spaces escaped with a backslash."""
    return str(path).replace(" ", "\\ ")


async def say(pilot: Any, text: str) -> None:
    await type_and_send(pilot, text)
    await wait_idle(pilot)


def vision_backend() -> FakeBackend:
    backend = FakeBackend(reply="A cat.")
    backend.vision_models.add("tiny:latest")
    return backend


def test_paths_of_images_are_taken_out_of_the_prompt(picture: Path, tmp_path: Path) -> None:
    escaped = str(picture).replace(" ", "\\ ")
    assert attachments.take_paths(f"what is {escaped} showing?") == ("what is showing?", [picture])
    assert attachments.take_paths(f"'{picture}' and \"{picture}\"") == ("and", [picture, picture])
    assert attachments.take_paths("see /no/such/file.png and notes.txt") == (
        "see /no/such/file.png and notes.txt", [])
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(Exception, match="not an image localrun reads"):
        attachments.load(tmp_path / "notes.txt")


async def test_an_image_goes_with_the_next_message_and_stays_in_the_saved_chat(tmp_path: Path,
                                                                                picture: Path) -> None:
    backend = vision_backend()
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_idle(pilot)
        await type_and_send(pilot, f'/image "{picture}"')
        await wait_idle(pilot)
        assert any("Attached cat.png" in line for line in infos(app))
        await type_and_send(pilot, "what is this?")
        await wait_idle(pilot)
        sent = backend.chats[-1]["messages"][-1]
        assert sent == {"role": "user", "content": "what is this?",
                        "images": [base64.b64encode(picture.read_bytes()).decode()]}
        assert "[image: cat.png]" in str(app.screen.query(UserMessage)[-1].render())
        await type_and_send(pilot, "and now?")  # the image was for one message; history keeps it
        await wait_idle(pilot)
        history = backend.chats[-1]["messages"]
        assert "images" in history[0] and "images" not in history[-1]
    saved = ConversationStore(tmp_path / "conversations").list()
    reopened = ConversationStore(tmp_path / "conversations").load(saved[0].id)
    assert reopened.messages[0]["image_names"] == ["cat.png"] and reopened.messages[0]["images"]


async def test_a_dropped_path_attaches_the_image(tmp_path: Path, picture: Path) -> None:
    backend = vision_backend()
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_idle(pilot)
        await type_and_send(pilot, f"{dropped(picture)} describe it")
        await wait_idle(pilot)
        sent = backend.chats[-1]["messages"][-1]
        assert sent["content"] == "describe it" and len(sent["images"]) == 1


async def test_a_model_without_vision_says_so_and_attaches_nothing(tmp_path: Path, picture: Path) -> None:
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_idle(pilot)
        await say(pilot, f"/image {picture}")
        assert any("does not take images" in line and "nothing attached" in line for line in infos(app))
        assert not any("Attached" in line for line in infos(app))
        await say(pilot, f"{dropped(picture)} what is this?")  # dropped first
        assert not backend.chats  # refused, kept in the input: nothing is sent without its image
        assert "what is this?" in app.screen.query_one(PromptInput).text
        app.screen.query_one(PromptInput).clear()
        await say(pilot, "what is this?")
        assert backend.chats[-1]["messages"][-1] == {"role": "user", "content": "what is this?"}


async def test_a_path_inside_a_message_to_a_text_model_stays_words(tmp_path: Path, picture: Path) -> None:
    """As in Ollama's REPL: a model that sees no images is asked about the path, not sent the file."""
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_idle(pilot)
        await say(pilot, f"why does '{picture}' fail to load?")
        sent = backend.chats[-1]["messages"][-1]
        assert sent == {"role": "user", "content": f"why does '{picture}' fail to load?"}


async def test_switching_to_a_text_model_drops_the_attachment_and_says_so(tmp_path: Path, picture: Path) -> None:
    backend = vision_backend()
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_idle(pilot)
        await say(pilot, f'/image "{picture}"')
        await say(pilot, "/load other")
        assert any("cat.png no longer attached" in line for line in infos(app))
        await say(pilot, "hello")
        assert backend.chats[-1]["model"] == "other" and "images" not in backend.chats[-1]["messages"][-1]
