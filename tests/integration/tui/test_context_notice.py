"""The chat UI says when the conversation no longer fits the model's context, and how much of it the
reply did not see, driven with Pilot: against the fake backend, and against a real daemon whose tiny
model runs with a 256-token context (the daemon cuts the front of /api/chat prompts, as Ollama does)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from tui_fakes import FakeBackend

from localrun.config import load_settings, models_dir
from localrun.errors import DaemonUnavailable
from localrun.server.app import create_app
from localrun.tui.app import LocalrunApp
from localrun.tui.backend import ClientBackend, DaemonApi
from localrun.tui.conversations import ConversationStore
from localrun.tui.session import ChatSession
from localrun.tui.widgets import AssistantMessage, InfoMessage, PromptInput

pytestmark = pytest.mark.timeout(120)

NOTICE = re.compile(r"The conversation no longer fits the model's (?:([\d,]+)-token )?context: its oldest ([\d,]+) "
                    r"tokens were left out of this reply")


class CuttingBackend(FakeBackend):
    """The fake daemon, whose final chunk says the prompt's oldest ``cut`` tokens were left out."""

    def __init__(self, cut: int, ps_fails: bool = False) -> None:
        super().__init__(reply="Fine.")
        self.cut, self.ps_fails = cut, ps_fails

    async def chat(self, model: str, messages: list[dict[str, Any]], **fields: Any) -> AsyncIterator[dict[str, Any]]:
        async for chunk in super().chat(model, messages, **fields):
            yield {**chunk, "prompt_truncated_count": self.cut} if chunk.get("done") and self.cut else chunk

    async def ps(self) -> list[dict[str, Any]]:
        if self.ps_fails:
            raise DaemonUnavailable("no localrun daemon answers")
        return [{**row, "context_length": 32768} for row in await super().ps()]


def make_app(tmp_path: Path, backend: DaemonApi, model: str = "tiny:latest") -> LocalrunApp:
    store = ConversationStore(tmp_path / "conversations")
    return LocalrunApp(backend, session=ChatSession.start(model, store=store), conversations=store,
                       health_interval=0)


async def send_and_wait(pilot: Any, text: str) -> None:
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.focus()
    prompt.insert(text)
    await pilot.press("enter")
    for _ in range(3000):
        await pilot.pause(0.01)
        if not pilot.app.screen.streaming and not any(w.is_running for w in pilot.app.workers
                                                      if w.group in ("reply", "model")):
            break
    await pilot.pause()


def notices(app: LocalrunApp) -> list[re.Match[str]]:
    found = [NOTICE.search(str(w.render())) for w in app.screen.query(InfoMessage)]
    return [m for m in found if m]


async def test_a_cut_reply_is_followed_by_a_notice_naming_the_context_and_the_tokens_left_out(tmp_path: Path) -> None:
    app = make_app(tmp_path, CuttingBackend(1234))
    async with app.run_test(size=(120, 40)) as pilot:
        await send_and_wait(pilot, "a long conversation")
        (notice,) = notices(app)
        assert notice[1] == "32,768" and notice[2] == "1,234"
        # after the reply it is about, and the turn is kept as usual
        log = list(app.screen.query_one("#log").children)
        assert isinstance(log[-2], AssistantMessage) and isinstance(log[-1], InfoMessage)
        assert app.screen.session.messages[-1]["content"] == "Fine."  # type: ignore[attr-defined]


async def test_no_notice_when_the_conversation_fits(tmp_path: Path) -> None:
    app = make_app(tmp_path, CuttingBackend(0))
    async with app.run_test(size=(120, 40)) as pilot:
        await send_and_wait(pilot, "short")
        assert notices(app) == [] and app.screen.query_one(AssistantMessage).footer


async def test_the_notice_still_comes_when_the_context_size_is_unknown(tmp_path: Path) -> None:
    app = make_app(tmp_path, CuttingBackend(77, ps_fails=True))
    async with app.run_test(size=(120, 40)) as pilot:
        await send_and_wait(pilot, "a long conversation")
        (notice,) = notices(app)
        assert notice[1] is None and notice[2] == "77"


async def test_against_a_real_daemon_the_notice_names_its_context(tmp_path: Path, tiny_gguf: Path) -> None:
    from localrun.store import ModelStore

    store = ModelStore(models_dir())
    store.create("tiny", f"FROM {tiny_gguf}\nPARAMETER temperature 0\nPARAMETER num_ctx 256\nPARAMETER num_predict 2\n")
    server = TestServer(create_app(load_settings(), store=store), host="127.0.0.1")
    await server.start_server()
    backend = ClientBackend(base_url=str(server.make_url("")).rstrip("/"))
    try:
        app = make_app(tmp_path, backend, model="tiny")
        async with app.run_test(size=(120, 40)) as pilot:
            await send_and_wait(pilot, "hello world " * 200)
            (notice,) = notices(app)
            assert notice[1] == "256" and int(notice[2].replace(",", "")) > 0
    finally:
        await backend.aclose()
        await server.close()
