"""Snapshot tests of the main screens (pytest-textual-snapshot): chat with a streamed reply, help,
model picker, settings editor, dashboard. The daemon is the fake backend, and the clock the chat
reads is fixed, so the pictures are deterministic. Update after a deliberate change with
``pytest tests/e2e/test_tui_snapshots.py --snapshot-update`` and look at the SVGs."""

from __future__ import annotations

import itertools

import pytest
from tui_fakes import FakeBackend

from localrun.tui.app import LocalrunApp
from localrun.tui.session import ChatSession
from localrun.tui.widgets import PromptInput

SIZE = (100, 32)
REPLY = """Here is a **bold** answer with a list:

- one
- two

```python
def greet(name: str) -> str:
    return f"hello {name}"
```
"""


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = itertools.count()
    monkeypatch.setattr("localrun.tui.chat.time.monotonic", lambda: next(ticks) * 0.125)


def chat_app(backend: FakeBackend | None = None) -> LocalrunApp:
    session = ChatSession.start("tiny:latest", options={"temperature": 0.2})
    return LocalrunApp(backend or FakeBackend(reply=REPLY), session=session, health_interval=0)


async def steady(pilot) -> None:  # type: ignore[no-untyped-def]
    """Let the app's workers finish (the model preload fills the defaults F3 shows) and stop cursors
    blinking, so the picture does not depend on how busy the machine is or when it is taken."""
    from textual.widgets import Input, TextArea

    await pilot.app.workers.wait_for_complete()

    for screen in pilot.app.screen_stack:
        for widget in screen.query("TextArea, Input"):
            if isinstance(widget, (TextArea, Input)):
                widget.cursor_blink = False
    await pilot.wait_for_scheduled_animations()
    await pilot.pause(0.2)


async def send(pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.insert(text)
    await pilot.press("enter")
    for _ in range(200):
        await pilot.pause(0.01)
        if not pilot.app.screen.streaming and not any(w.is_running for w in pilot.app.workers):
            break
    await pilot.pause(0.1)


def test_chat_with_streamed_reply(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await send(pilot, "Write a greeting function")
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=SIZE, run_before=run_before)


def test_chat_help(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await send(pilot, "/?")
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=(100, 40), run_before=run_before)


def test_model_picker(snap_compare) -> None:  # type: ignore[no-untyped-def]
    backend = FakeBackend()
    backend.loaded = ["tiny:latest"]

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await steady(pilot)
        await pilot.press("f2")
        for _ in range(100):
            await pilot.pause(0.02)
            if pilot.app.screen.query("#model-list") and pilot.app.screen.query_one("#model-list").option_count:
                break
        await steady(pilot)

    assert snap_compare(chat_app(backend), terminal_size=SIZE, run_before=run_before)


def test_settings_editor(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await steady(pilot)
        await pilot.press("f3")
        for _ in range(100):
            await pilot.pause(0.02)
            if pilot.app.screen.query("#settings") and pilot.app.screen.focused is not None:
                break
        await steady(pilot)

    assert snap_compare(chat_app(), terminal_size=(100, 36), run_before=run_before)


def test_dashboard(snap_compare) -> None:  # type: ignore[no-untyped-def]
    backend = FakeBackend()
    backend.loaded = ["tiny:latest", "other:latest"]
    app = LocalrunApp(backend, mode="top", health_interval=0, refresh_interval=60)

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=(110, 30), run_before=run_before)
