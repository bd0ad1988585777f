"""The chat UI driven with Pilot against a real ``localrun serve`` on generated tiny models.

The daemon runs in the background as ``localrun run`` starts it (ensure_daemon). Runners host
the fake engine (it echoes " w0 w1 ...", honours num_predict, and streams slowly for prompts
containing SLOW) so stopping and timing are under control; when the real engine is importable,
the send/stream test also runs on real llama.cpp with the tiny GGUF.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from daemonproc import stop_daemon
from textual.widgets import DataTable, Markdown

from localrun import config
from localrun.cli.connect import ensure_daemon
from localrun.tui.app import LocalrunApp
from localrun.tui.backend import ClientBackend
from localrun.tui.chat import ChatScreen
from localrun.tui.session import ChatSession
from localrun.tui.widgets import AssistantMessage, InfoMessage, PromptInput

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
FAKES = Path(__file__).parents[1] / "integration" / "server"
REAL_ENGINE = importlib.util.find_spec("localrun.engine.engine") is not None


@pytest.fixture(params=["fake-engine", "real-engine"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "fake-engine":
        monkeypatch.setenv("LOCALRUN_RUNNER_FACTORY", "fake_engine:FakeEngine")
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]))
    elif not REAL_ENGINE:
        pytest.skip("the real engine (localrun.engine.engine) is not there yet")
    return str(request.param)


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALRUN_RUNNER_FACTORY", "fake_engine:FakeEngine")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture
def daemon(tiny_gguf: Path, tiny_gguf_b: Path) -> Iterator[None]:
    """Two models in the store (tiny, tiny-b) and a background daemon; stopped afterwards."""
    from localrun.store import ModelStore

    store = ModelStore(config.models_dir())
    store.create("tiny", f"FROM {tiny_gguf}\nPARAMETER num_ctx 512\nPARAMETER temperature 0\n")
    store.create("tiny-b", f"FROM {tiny_gguf_b}\nPARAMETER num_ctx 512\n")
    ensure_daemon(timeout=60).close()
    yield
    stop_daemon()


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[LocalrunApp]:
    from localrun.tui.conversations import ConversationStore

    store = ConversationStore(tmp_path / "conversations")
    session = ChatSession.start("tiny", store=store)
    yield LocalrunApp(ClientBackend(), session=session, conversations=store, health_interval=0,
                      refresh_interval=0.2)


async def send(pilot, text: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.focus()
    prompt.insert(text)
    await pilot.press("enter")
    await idle(pilot, timeout)


async def idle(pilot, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        await pilot.pause(0.05)
        if not pilot.app.screen.streaming and not any(
                w.is_running for w in pilot.app.workers if w.group in ("reply", "model")):
            break
    await pilot.pause(0.05)


def last_reply(app: LocalrunApp) -> AssistantMessage:
    return app.screen.query(AssistantMessage).last()


def infos(app: LocalrunApp) -> str:
    return "\n".join(str(w.render()) for w in app.screen.query(InfoMessage))


async def test_send_and_see_the_streamed_reply(engine: str, daemon: None, app: LocalrunApp) -> None:
    async with app.run_test(size=(100, 40)) as pilot:
        await send(pilot, "/set parameter num_predict 6")
        await send(pilot, "hello world")
        reply = last_reply(app)
        assert reply.has_class("done"), reply.footer
        text = reply.query_one(Markdown).source
        assert text.strip()
        assert "6 tokens" in reply.footer and "tok/s" in reply.footer and "first token" in reply.footer
        if engine == "fake-engine":
            assert text.split() == ["w0", "w1", "w2", "w3", "w4", "w5"]
        await send(pilot, "and again")
        assert last_reply(app).has_class("done")
        assert app.session is not None and len(app.session.messages) == 4


async def test_escape_stops_a_long_reply_and_frees_the_daemon(fake_engine: None, daemon: None,
                                                               app: LocalrunApp) -> None:
    async with app.run_test() as pilot:
        prompt = app.screen.query_one(PromptInput)
        prompt.insert("SLOW please")
        await pilot.press("enter")
        for _ in range(400):
            await pilot.pause(0.05)
            if len(last_reply(app).query_one(Markdown).source.split()) >= 5:
                break
        await pilot.press("escape")
        await idle(pilot)
        reply = last_reply(app)
        assert reply.has_class("stopped")
        kept = reply.query_one(Markdown).source.split()
        assert len(kept) >= 5 and kept[:2] == ["w0", "w1"]
        assert app.session is not None and app.session.messages[-1]["content"].split()[:2] == ["w0", "w1"]
        for _ in range(100):  # the daemon sees the disconnect and frees the slot
            models = await app.backend.ps()
            if models and all(m.get("active") == 0 for m in models):
                break
            await asyncio.sleep(0.05)
        assert models and all(m.get("active") == 0 for m in models)


async def test_slash_commands_against_the_daemon(fake_engine: None, daemon: None, app: LocalrunApp) -> None:
    async with app.run_test(size=(100, 60)) as pilot:
        await send(pilot, "/show info")
        assert "architecture" in infos(app) and "llama" in infos(app)
        await send(pilot, "/show parameters")
        assert "num_ctx" in infos(app)
        await send(pilot, "/set system You are terse.")
        await send(pilot, "/set parameter num_predict 3")
        await send(pilot, "hi")
        assert last_reply(app).query_one(Markdown).source.split() == ["w0", "w1", "w2"]
        await send(pilot, "/save tiny-terse")
        assert "Created new model 'tiny-terse'" in infos(app), infos(app)
        names = [m["name"] for m in await app.backend.list()]
        assert "tiny-terse:latest" in names
        shown = await app.backend.show("tiny-terse")
        assert "You are terse." in shown.get("system", "") or "You are terse." in shown.get("modelfile", "")
        assert "MESSAGE" in shown.get("modelfile", "") or shown.get("messages")
        await send(pilot, "/load no-such-model")
        assert "Couldn't load 'no-such-model'" in infos(app)
        assert app.session is not None and app.session.model == "tiny"


async def test_switching_models_with_load_and_the_picker(fake_engine: None, daemon: None,
                                                         app: LocalrunApp) -> None:
    async with app.run_test(size=(100, 40)) as pilot:
        await send(pilot, "/load tiny-b")
        assert app.session is not None and app.session.model == "tiny-b"
        assert "tiny-b:latest" in [m["name"] for m in await app.backend.ps()]
        await send(pilot, "hello")
        assert last_reply(app).has_class("done") and last_reply(app).border_title == "tiny-b"
        await pilot.press("f2")
        await pilot.pause(0.5)
        await pilot.press("t", "i", "n", "y", ":")  # filter to tiny:latest only
        await pilot.pause(0.2)
        await pilot.press("enter")
        await idle(pilot)
        assert isinstance(app.screen, ChatScreen)
        assert app.session.model == "tiny:latest"


async def test_dashboard_shows_the_loaded_model(fake_engine: None, daemon: None, app: LocalrunApp) -> None:
    async with app.run_test(size=(120, 40)) as pilot:
        await send(pilot, "hello")
        await pilot.press("f5")
        await pilot.pause(0.6)
        table = app.screen.query_one("#models", DataTable)
        row = [str(c) for c in table.get_row("tiny:latest")]
        assert row[1] == "100% CPU" and row[4] == "512" and row[5] == "0"
        assert row[8].endswith("s") or row[8] == "forever"  # keep-alive countdown like "4m 58s"


async def test_reconnects_when_the_daemon_restarts(fake_engine: None, daemon: None, tmp_path: Path) -> None:
    session = ChatSession.start("tiny")
    app = LocalrunApp(ClientBackend(), session=session, health_interval=0.2,
                      restart_daemon=lambda: ensure_daemon(timeout=60).close())
    async with app.run_test() as pilot:
        await send(pilot, "before")
        assert last_reply(app).has_class("done")
        await asyncio.to_thread(stop_daemon)
        for _ in range(100):
            await pilot.pause(0.1)
            if not app.connected:
                break
        assert not app.connected
        assert "reconnecting" in str(app.screen.query_one("#chat-title").render())
        for _ in range(300):  # after a few failed checks the app starts a new daemon itself
            await pilot.pause(0.1)
            if app.connected:
                break
        assert app.connected
        await send(pilot, "after")
        assert last_reply(app).has_class("done")
        assert [m["content"] for m in session.messages if m["role"] == "user"] == ["before", "after"]
