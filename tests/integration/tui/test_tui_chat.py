"""The chat UI driven with Pilot against the fake backend: type, send, stream, stop, slash commands,
model switch, settings, saved conversations, and a daemon that goes away and comes back."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest
from textual.widgets import Input, Markdown, OptionList, TextArea
from tui_fakes import FakeBackend
from tuiscreen import screen_lines

from localrun.tui.app import LocalrunApp
from localrun.tui.chat import ChatScreen
from localrun.tui.conversations import ConversationStore
from localrun.tui.session import ChatSession
from localrun.tui.widgets import AssistantMessage, InfoMessage, PromptInput, UserMessage

pytestmark = pytest.mark.timeout(60)


def make_app(tmp_path: Path, backend: FakeBackend | None = None, **kw: object) -> LocalrunApp:
    store = ConversationStore(tmp_path / "conversations")
    session = ChatSession.start("tiny:latest", store=store)
    return LocalrunApp(backend or FakeBackend(), session=session, conversations=store, health_interval=0, **kw)


async def type_and_send(pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    prompt = pilot.app.screen.query_one(PromptInput)
    prompt.focus()
    prompt.insert(text)
    await pilot.press("enter")


async def wait_idle(pilot) -> None:  # type: ignore[no-untyped-def]
    screen = pilot.app.screen
    for _ in range(200):
        await pilot.pause(0.01)
        if not getattr(screen, "streaming", False) and not any(w.is_running for w in pilot.app.workers
                                                               if w.group in ("reply", "model")):
            break
    await pilot.pause()


def infos(app: LocalrunApp) -> list[str]:
    return [str(w.render()) for w in app.screen.query(InfoMessage)]


async def test_send_streams_markdown_reply_with_stats(tmp_path: Path) -> None:
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await type_and_send(pilot, "hello there")
        await wait_idle(pilot)
        users = [str(w.render()) for w in app.screen.query(UserMessage)]
        assert users == ["hello there"]
        reply = app.screen.query_one(AssistantMessage)
        body = reply.query_one(Markdown)
        assert "print('hi')" in body.source and "**there**" in body.source
        assert "tok/s" in reply.footer and "first token" in reply.footer and "8 cached" in reply.footer
        # the input is cleared and the turn is in the history sent next time
        assert app.screen.query_one(PromptInput).text == ""
        await type_and_send(pilot, "and again")
        await wait_idle(pilot)
        sent = backend.chats[-1]["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
        assert sent[1]["content"].startswith("Hello **there**")


async def test_ctrl_j_inserts_newline_and_enter_sends_both_lines(tmp_path: Path) -> None:
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test() as pilot:
        app.screen.query_one(PromptInput).focus()
        await pilot.press("o", "n", "e", "ctrl+j", "t", "w", "o")
        assert app.screen.query_one(PromptInput).text == "one\ntwo"
        await pilot.press("enter")
        await wait_idle(pilot)
        assert backend.chats[-1]["messages"][-1]["content"] == "one\ntwo"


async def test_escape_stops_reply_and_keeps_partial_text(tmp_path: Path) -> None:
    backend = FakeBackend(reply="first second third fourth")
    backend.gate = asyncio.Event()  # the stream waits after its first chunk
    app = make_app(tmp_path, backend)
    async with app.run_test() as pilot:
        await type_and_send(pilot, "tell me")
        for _ in range(100):
            await pilot.pause(0.01)
            if "first" in app.screen.query_one(AssistantMessage).query_one(Markdown).source:
                break
        assert app.screen.streaming
        await pilot.press("escape")
        await wait_idle(pilot)
        reply = app.screen.query_one(AssistantMessage)
        assert reply.has_class("stopped") and "stopped" in reply.footer
        assert reply.query_one(Markdown).source.strip() == "first"
        session = app.session
        assert session is not None and session.messages[-1]["content"].strip() == "first"
        # the UI is usable again: the next message streams normally
        backend.gate = None
        await type_and_send(pilot, "go on")
        await wait_idle(pilot)
        assert len(app.screen.query(AssistantMessage)) == 2


async def test_ctrl_c_stops_a_reply_like_ollama(tmp_path: Path) -> None:
    backend = FakeBackend(reply="one two three")
    backend.gate = asyncio.Event()
    app = make_app(tmp_path, backend)
    async with app.run_test() as pilot:
        await type_and_send(pilot, "go")
        for _ in range(100):
            await pilot.pause(0.01)
            if app.screen.query_one(AssistantMessage).query_one(Markdown).source:
                break
        await pilot.press("ctrl+c")
        await wait_idle(pilot)
        assert app.screen.query_one(AssistantMessage).has_class("stopped")
        await pilot.press("ctrl+c")  # nothing streaming: the app stays open
        await pilot.pause()
        assert app.is_running


async def test_up_recalls_previous_prompt(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test() as pilot:
        await type_and_send(pilot, "first question")
        await wait_idle(pilot)
        app.screen.query_one(PromptInput).focus()
        await pilot.press("up")
        assert app.screen.query_one(PromptInput).text == "first question"
        await pilot.press("down")
        assert app.screen.query_one(PromptInput).text == ""


async def test_slash_commands_set_show_help_and_errors(tmp_path: Path) -> None:
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 50)) as pilot:
        await type_and_send(pilot, "/set parameter temperature 0.2")
        await type_and_send(pilot, "/set system You are terse.")
        await type_and_send(pilot, "/set parameter top_p 7")
        await type_and_send(pilot, "/show info")
        await wait_idle(pilot)
        await type_and_send(pilot, "/?")
        await type_and_send(pilot, "/frobnicate")
        text = "\n".join(infos(app))
        assert "Set parameter 'temperature' to '0.2'" in text
        assert "Set system message." in text
        assert "top_p" in text and "between 0 and 1" in text
        assert "architecture" in text and "llama" in text and "context length" in text
        assert "/load MODEL" in text and "Ctrl+J" in text
        assert "Unknown command '/frobnicate'" in text
        assert app.screen.query(InfoMessage).last().has_class("error")
        await type_and_send(pilot, "hi")
        await wait_idle(pilot)
        sent = backend.chats[-1]
        assert sent["options"] == {"temperature": 0.2}
        assert sent["messages"][0] == {"role": "system", "content": "You are terse."}
        await type_and_send(pilot, "/show parameters")
        await type_and_send(pilot, "/show system")
        await wait_idle(pilot)
        text = "\n".join(infos(app))
        assert "User defined parameters" in text and "You are terse." in text


async def test_clear_and_bye(tmp_path: Path) -> None:
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test() as pilot:
        await type_and_send(pilot, "remember this")
        await wait_idle(pilot)
        await type_and_send(pilot, "/clear")
        await pilot.pause()
        assert app.session is not None and app.session.messages == []
        assert not app.screen.query(AssistantMessage)
        await type_and_send(pilot, "new start")
        await wait_idle(pilot)
        assert [m["content"] for m in backend.chats[-1]["messages"]] == ["new start"]
        await type_and_send(pilot, "/bye")
        await pilot.pause()
    assert app.return_code == 0


async def test_load_switches_model_and_pulls_missing_one(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.pullable["fresh:latest"] = {"name": "fresh:latest", "size": 5}
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await type_and_send(pilot, "/load other")
        await wait_idle(pilot)
        assert app.session is not None and app.session.model == "other"
        await type_and_send(pilot, "hi")
        await wait_idle(pilot)
        assert backend.chats[-1]["model"] == "other"
        await type_and_send(pilot, "/load fresh")
        await wait_idle(pilot)
        assert app.session.model == "fresh"
        assert app.pulls["fresh"].done and app.pulls["fresh"].total == 100
        await type_and_send(pilot, "/load nowhere")
        await wait_idle(pilot)
        assert app.session.model == "fresh"  # unchanged after a failed load
        assert "Couldn't load 'nowhere'" in "\n".join(infos(app))


async def test_model_picker_switches_model(tmp_path: Path) -> None:
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("f2")
        await pilot.pause(0.1)
        picker_list = app.screen.query_one("#model-list", OptionList)
        assert picker_list.option_count == 2
        await pilot.press("o", "t", "h")  # filter
        await pilot.pause()
        assert picker_list.option_count == 1
        await pilot.press("enter")
        await wait_idle(pilot)
        assert isinstance(app.screen, ChatScreen)
        assert app.session is not None and app.session.model == "other:latest"
        assert "other:latest" in str(app.screen.query_one("#chat-title").render())


async def test_settings_dialog_edits_system_and_parameters(tmp_path: Path) -> None:
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 45)) as pilot:
        await pilot.press("f3")
        await pilot.pause()
        app.screen.query_one("#system", TextArea).load_text("Answer in French.")
        app.screen.query_one("#param-temperature", Input).value = "hot"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "expects a number" in str(app.screen.query_one("#settings-error").render())
        app.screen.query_one("#param-temperature", Input).value = "0.5"
        app.screen.query_one("#param-stop", Input).value = "<end> ###"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, ChatScreen)
        await type_and_send(pilot, "bonjour")
        await wait_idle(pilot)
        sent = backend.chats[-1]
        assert sent["options"] == {"temperature": 0.5, "stop": ["<end>", "###"]}
        assert sent["messages"][0]["content"] == "Answer in French."


async def test_save_creates_model_with_messages(tmp_path: Path) -> None:
    backend = FakeBackend(reply="Paris.")
    app = make_app(tmp_path, backend)
    async with app.run_test() as pilot:
        await type_and_send(pilot, "/set system Be brief.")
        await type_and_send(pilot, "/set parameter temperature 0")
        await type_and_send(pilot, "Capital of France?")
        await wait_idle(pilot)
        await type_and_send(pilot, "/save geo")
        await wait_idle(pilot)
        modelfile = backend.created["geo"]
        assert modelfile.splitlines()[0] == "FROM tiny:latest"
        assert 'SYSTEM """Be brief."""' in modelfile and "PARAMETER temperature 0.0" in modelfile
        assert 'MESSAGE user """Capital of France?"""' in modelfile
        assert 'MESSAGE assistant """Paris."""' in modelfile
        assert "Created new model 'geo'" in "\n".join(infos(app))


async def test_conversations_are_saved_private_and_reopen(tmp_path: Path) -> None:
    backend = FakeBackend(reply="Sure.")
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await type_and_send(pilot, "Plan a trip")
        await wait_idle(pilot)
        first_id = app.session.conversation.id  # type: ignore[union-attr]
        await pilot.press("ctrl+n")
        await type_and_send(pilot, "Another topic")
        await wait_idle(pilot)
        files = sorted((tmp_path / "conversations").glob("*.json"))
        assert len(files) == 2
        for f in files:
            assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
        await pilot.press("f4")
        await pilot.pause()
        options = app.screen.query_one(OptionList)
        assert options.option_count == 2
        assert "Another topic" in str(options.get_option_at_index(0).prompt)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ChatScreen)
        assert app.session.conversation.id == first_id  # type: ignore[union-attr]
        assert [str(w.render()) for w in app.screen.query(UserMessage)] == ["Plan a trip"]
        await type_and_send(pilot, "continue")
        await wait_idle(pilot)
        assert next(m["content"] for m in backend.chats[-1]["messages"]) == "Plan a trip"


async def test_daemon_gone_keeps_prompt_and_reconnects(tmp_path: Path) -> None:
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test() as pilot:
        backend.down = True
        await type_and_send(pilot, "are you there?")
        await wait_idle(pilot)
        reply = app.screen.query_one(AssistantMessage)
        assert reply.has_class("error") and "no localrun daemon" in reply.footer
        assert app.screen.query_one(PromptInput).text == "are you there?"  # nothing lost
        assert not app.connected
        assert "reconnecting" in str(app.screen.query_one("#chat-title").render())
        backend.down = False
        app.check_health()
        await pilot.pause(0.1)
        assert app.connected
        assert "reconnecting" not in str(app.screen.query_one("#chat-title").render())
        await pilot.press("enter")
        await wait_idle(pilot)
        assert app.screen.query(AssistantMessage).last().has_class("done")


async def test_restart_is_noticed_and_a_dead_daemon_is_restarted(tmp_path: Path) -> None:
    backend = FakeBackend()
    restarted: list[bool] = []

    def restart() -> None:
        restarted.append(True)
        backend.down = False
        backend.uptime = 1.0

    app = make_app(tmp_path, backend, restart_daemon=restart)
    async with app.run_test() as pilot:
        app.check_health()
        await pilot.pause(0.05)
        backend.down = True
        for _ in range(3):
            app.check_health()
            await pilot.pause(0.05)
        for _ in range(50):
            await pilot.pause(0.02)
            if restarted:
                break
        assert restarted
        app.check_health()
        await pilot.pause(0.05)
        assert app.connected


async def test_dashboard_from_chat_shows_models_and_rates(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.loaded = ["tiny:latest"]
    app = make_app(tmp_path, backend, refresh_interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f5")
        for _ in range(5):
            backend.generated += 50
            await pilot.pause(0.06)
        from textual.widgets import DataTable

        table = app.screen.query_one("#models", DataTable)
        row = [str(c) for c in table.get_row("tiny:latest")]
        assert row[1] == "100% CPU" and row[4] == "2048" and row[7] == "25%" and row[8] == "forever"
        cache = str(app.screen.query_one("#total-cache").render())
        assert "75%" in cache
        assert max(app.screen.samples) > 0  # type: ignore[attr-defined]
        await pilot.press("escape")
        assert isinstance(app.screen, ChatScreen)


async def test_quitting_while_a_reply_streams_exits_cleanly(tmp_path: Path) -> None:
    backend = FakeBackend(reply="one two three")
    backend.gate = asyncio.Event()
    app = make_app(tmp_path, backend)
    async with app.run_test() as pilot:
        await type_and_send(pilot, "go")
        await pilot.pause(0.1)
        await pilot.press("ctrl+q")
        await pilot.pause(0.1)
    assert app.return_code in (0, None)  # an error in the stopping worker would fail run_test


async def test_model_loads_while_the_user_types(tmp_path: Path) -> None:
    backend = FakeBackend()
    app = make_app(tmp_path, backend)
    async with app.run_test() as pilot:
        await wait_idle(pilot)
        assert backend.loaded == ["tiny:latest"]
        assert str(app.screen.query_one("#status").render()) == ""


async def test_missing_model_at_start_is_reported(tmp_path: Path) -> None:
    backend = FakeBackend()
    store = ConversationStore(tmp_path / "c")
    app = LocalrunApp(backend, session=ChatSession.start("gone", store=store), health_interval=0)
    async with app.run_test() as pilot:
        await wait_idle(pilot)
        assert "Couldn't load 'gone'" in "\n".join(infos(app))


async def test_single_newlines_in_a_reply_stay_line_breaks(tmp_path: Path) -> None:
    haiku = "An old silent pond\nA frog jumps into the pond\nSplash! Silence again"
    app = make_app(tmp_path, FakeBackend(reply=haiku))
    async with app.run_test(size=(100, 40)) as pilot:
        await type_and_send(pilot, "a haiku please")
        await wait_idle(pilot)
        shown = screen_lines(app.screen.query_one(AssistantMessage).query_one(Markdown))
        assert shown == haiku.splitlines()


async def test_thinking_is_collapsed_and_tool_calls_are_shown_as_calls(tmp_path: Path) -> None:
    from textual.widgets import Collapsible

    backend = FakeBackend(reply="It is sunny.")
    backend.thinking = "The user wants the weather, so I call the tool."
    backend.tool_calls = [{"id": "call_1", "function": {"index": 0, "name": "get_weather",
                                                        "arguments": {"city": "Paris"}}}]
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await type_and_send(pilot, "weather in Paris?")
        await wait_idle(pilot)
        reply = app.screen.query_one(AssistantMessage)
        section = reply.query_one(Collapsible)
        assert section.display and section.collapsed and section.title == "Thinking"
        assert reply.thinking == backend.thinking
        assert not any("so I call the tool" in line for line in screen_lines(reply))  # collapsed: not drawn
        calls = [str(w.render()) for w in reply.query(".tool-call")]
        assert calls == ['→ tool call: get_weather({"city": "Paris"})']
        saved = app.session.messages[-1]
        assert saved["thinking"] == backend.thinking and saved["tool_calls"] == backend.tool_calls
        assert "thinking" not in backend.chats[-1]["messages"][-1]


async def test_set_think_goes_with_the_request_and_hidethinking_keeps_the_reasoning_unshown(tmp_path: Path) -> None:
    backend = FakeBackend(reply="Paris.")
    backend.thinking = "France's capital city."
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        for line in ("/set think high", "/set hidethinking"):
            await type_and_send(pilot, line)
        await type_and_send(pilot, "capital of France?")
        await wait_idle(pilot)
        assert backend.chats[-1]["think"] == "high"
        reply = app.screen.query(AssistantMessage).last()
        assert not reply.thinking and not any("capital city" in line for line in screen_lines(reply))
        assert app.session.messages[-1]["thinking"] == backend.thinking  # kept with the reply all the same
        await type_and_send(pilot, "/set nothink")
        await type_and_send(pilot, "again?")
        await wait_idle(pilot)
        assert backend.chats[-1]["think"] is False
        assert "Set 'think' mode to 'high'." in "\n".join(infos(app))


async def test_set_think_on_a_model_that_cannot_think_says_so_and_sets_nothing(tmp_path: Path) -> None:
    backend = FakeBackend(reply="Hi.")  # no reasoning: /api/show lists no "thinking"
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_idle(pilot)
        await type_and_send(pilot, "/set think high")
        await type_and_send(pilot, "hello")
        await wait_idle(pilot)
        assert "think" not in backend.chats[-1]
        assert "does not support thinking: 'think' mode not set." in "\n".join(infos(app))


async def test_settings_show_the_models_real_defaults(tmp_path: Path) -> None:
    app = make_app(tmp_path, FakeBackend())
    async with app.run_test(size=(100, 45)) as pilot:
        await wait_idle(pilot)
        await pilot.press("f3")
        await pilot.pause()
        placeholders = {name: app.screen.query_one(f"#param-{name}", Input).placeholder
                        for name in ("temperature", "top_k", "top_p", "num_ctx", "seed")}
        assert placeholders == {"temperature": "0.7", "top_k": "20", "top_p": "0.8", "num_ctx": "4096",
                                "seed": "none"}


async def test_a_base_model_is_named_as_such_once(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.base_models = {"tiny:latest"}
    app = make_app(tmp_path, backend)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_idle(pilot)
        await type_and_send(pilot, "hello")
        await wait_idle(pilot)
        notices = [t for t in infos(app) if "base model" in t]
        assert len(notices) == 1 and "localrun run qwen2.5-coder:0.5b" in notices[0]
