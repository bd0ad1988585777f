"""The chat screen: conversation log, prompt editor, streaming replies (slash commands: :mod:`.slash`).

All daemon I/O runs in workers: the reply stream (group ``reply``, exclusive, cancelled by Esc,
keeping the partial reply) and model operations (group ``model``). The screen mutates the
:class:`~localrun.tui.session.ChatSession`; nothing else does while it is shown.
"""

from __future__ import annotations

import asyncio
import time

from rich.text import Text
from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Static

from ..errors import DaemonUnavailable, LocalrunError, StoreError
from ..jsontypes import JSONObject, as_object, as_objects
from . import attachments, model_ops
from . import commands as cmd
from .backend import ReplyStats
from .session import ChatSession
from .shell import LocalrunShell
from .slash import SlashCommands
from .widgets import AssistantMessage, InfoMessage, PromptInput, UserMessage


class ChatScreen(SlashCommands, Screen[None]):
    BINDINGS = [
        Binding("escape", "stop", "Stop reply"),
        # Ctrl+C stops a reply as in `ollama run`; otherwise it copies the selection as usual.
        Binding("ctrl+c", "interrupt", "Stop", show=False, priority=True),
        Binding("f2", "pick_model", "Models"),
        Binding("f3", "settings", "Settings"),
        Binding("f4", "conversations", "Chats"),
        Binding("f5", "dashboard", "Dashboard"),
        Binding("ctrl+n", "new_chat", "New chat"),
    ]

    app = getters.app(LocalrunShell)  # it only ever runs inside LocalrunApp
    streaming: reactive[bool] = reactive(False)

    def __init__(self, session: ChatSession) -> None:
        super().__init__()
        self.session = session

    def compose(self) -> ComposeResult:
        yield Static(id="chat-title")
        yield VerticalScroll(id="log")
        yield Static(id="status")
        yield PromptInput(id="prompt", placeholder="Send a message (/? for help)")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#log", VerticalScroll).anchor()
        self.watch(self.app, "connected", self._connection_changed, init=False)
        self.render_conversation()
        self.query_one(PromptInput).focus()
        self.preload()

    @work(exclusive=True, group="model")
    async def preload(self) -> None:
        """Load the model while the user types, as ``ollama run`` does, so the first reply is quicker."""
        model = self.session.model
        self.set_status(f"Loading {model}… (type meanwhile)")
        try:
            await self.app.backend.load(model, self.session.keep_alive)
            await self.learn_model(model)
        except DaemonUnavailable:
            self.app.connection_lost()
        except LocalrunError as exc:
            self.info(f"Couldn't load '{model}': {exc}", error=True)
        finally:
            if not self.streaming:
                self.set_status("")

    async def learn_model(self, model: str) -> None:
        """Fetch the model's real defaults (for F3) and tell once when it is a base model."""
        facts = await model_ops.model_facts(self.app.backend, model)
        self.session.defaults = facts.defaults
        self.session.vision = facts.vision
        self.session.thinking = facts.thinking
        if self.session.think and not facts.thinking:  # /set think before the switch, or before we knew
            self.session.think = None
            self.info(f"{model} does not support thinking: 'think' mode is off for it.", error=True)
        if self.session.attached and not facts.vision:  # attached before the switch, or before we knew
            names = ", ".join(a.name for a in self.session.attached)
            self.session.attached = []
            self.info(f"{model} does not take images (it has no vision projector): {names} no longer "
                      "attached.", error=True)
        key = model_ops.full_name(model)
        if facts.base_model and key not in self.session.noticed:
            self.session.noticed.add(key)
            self.info(model_ops.base_model_notice(model))

    # ----- drawing -----------------------------------------------------------------------------

    def update_title(self) -> None:
        s = self.session
        parts = [s.model]
        if s.conversation.system:
            parts.append("system prompt set")
        if s.conversation.options:
            parts.append(" ".join(f"{k}={v}" for k, v in sorted(s.conversation.options.items())))
        if s.format:
            parts.append(f"format {s.format}")
        if not self.app.connected:
            parts.append("daemon unreachable: reconnecting")
        self.query_one("#chat-title", Static).update(Text(" · ".join(parts)))
        self.query_one("#chat-title").set_class(not self.app.connected, "disconnected")

    def set_status(self, text: str) -> None:
        self.query_one("#status", Static).update(Text(text))

    def render_conversation(self) -> None:
        """Redraw the log from the session (after /clear, or when a saved chat is reopened)."""
        log = self.query_one("#log", VerticalScroll)
        log.remove_children()
        widgets: list[Static | AssistantMessage] = []
        conv = self.session.conversation
        if not conv.messages:
            widgets.append(InfoMessage(f"Chatting with {conv.model}. Enter sends, Ctrl+J adds a line, "
                                       "Esc stops a reply. Type /? for help."))
        for message in conv.messages:
            if message["role"] == "user":
                widgets.append(UserMessage(message["content"], message.get("image_names")))
            elif message["role"] == "assistant":
                footer = "stopped" if message.get("stopped") else ""
                widgets.append(AssistantMessage(message["content"], model=conv.model, footer=footer,
                                                thinking=message.get("thinking") or "",
                                                tool_calls=message.get("tool_calls")))
        log.mount_all(widgets)
        self.update_title()
        self.set_status("")

    def info(self, text: str, *, error: bool = False) -> None:
        self.query_one("#log", VerticalScroll).mount(InfoMessage(text, error=error))

    def _connection_changed(self, connected: bool) -> None:
        self.update_title()

    # ----- input -------------------------------------------------------------------------------

    @on(PromptInput.Submitted)
    def submitted(self, event: PromptInput.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        if self.streaming:
            self.notify("A reply is still streaming: Esc stops it.", timeout=3)
            return
        dropped = attachments.starts_with_path(text)  # a file dropped first: not a slash command
        # As Ollama's REPL: only a model that sees images takes image paths out of the message; to a
        # text-only model a path inside a message is words like any other (it may be asked about one).
        takes_paths = dropped or (self.session.vision and not cmd.is_command(text))
        prompt, paths = attachments.take_paths(text) if takes_paths else (text, [])
        if paths and not self.attach([str(p) for p in paths]):
            return  # the message stays in the input: nothing is sent without its images
        event.prompt_input.remember(text)
        event.prompt_input.clear()
        if not prompt:  # only images: they go with the next message
            return
        if cmd.is_command(text) and not paths:
            self.run_command(text)
        else:
            self.send(cmd.unquote(prompt) if prompt.startswith('"""') else prompt)

    def attach(self, paths: list[str]) -> bool:
        """Attach the images at ``paths`` to the next message; False (and why, in the log) when the
        model takes no images, or one cannot be read or is no image localrun reads."""
        if not self.session.vision:
            self.info(f"{self.session.model} does not take images (it has no vision projector): nothing "
                      "attached. Load a vision model first (/load MODEL).", error=True)
            return False
        try:
            loaded = [attachments.load(path) for path in paths]
        except LocalrunError as exc:
            self.info(str(exc), error=True)
            return False
        self.session.attached.extend(loaded)
        names = ", ".join(a.name for a in self.session.attached)
        self.info(f"Attached {names}: it goes with your next message.")
        return True

    def send(self, prompt: str) -> None:
        log = self.query_one("#log", VerticalScroll)
        view = AssistantMessage(model=self.session.model)
        log.mount_all([UserMessage(prompt, [a.name for a in self.session.attached]), view])
        log.anchor()
        self.stream_reply(prompt, view)

    @work(exclusive=True, group="reply")
    async def stream_reply(self, prompt: str, view: AssistantMessage) -> None:
        session = self.session
        messages = session.request_messages(prompt)
        fields = session.request_fields()
        parts: list[str] = []
        thoughts: list[str] = []  # kept with the reply even when /set hidethinking hides them
        calls: list[JSONObject] = []
        stats: ReplyStats | None = None
        state, error = "done", ""
        started = time.monotonic()
        ttft: float | None = None
        self.streaming = True
        self.set_status(f"Waiting for {session.model}… Esc stops")
        view.start_stream()
        try:
            async for chunk in self.app.backend.chat(session.model, messages, **fields):
                message = as_object(chunk.get("message"))
                text, thinking = str(message.get("content") or ""), str(message.get("thinking") or "")
                if (text or thinking) and ttft is None:
                    ttft = time.monotonic() - started
                    self.set_status("Streaming… (Esc stops)")
                if thinking:
                    thoughts.append(thinking)
                    if not session.hide_thinking:
                        view.write_thinking(thinking)
                if text:
                    parts.append(text)
                    await view.write(text)
                for call in as_objects(message.get("tool_calls")):
                    calls.append(call)
                    await view.add_tool_call(call)
                if chunk.get("done"):
                    stats = ReplyStats.from_done(chunk, ttft)
        except asyncio.CancelledError:
            state = "stopped"
            raise
        except DaemonUnavailable as exc:
            state, error = "error", str(exc).splitlines()[0]
            self.app.connection_lost()
        except LocalrunError as exc:
            state, error = "error", str(exc)
        finally:
            await self._finish_reply(prompt, "".join(parts), "".join(thoughts), view, state, error, stats, calls)

    async def _finish_reply(self, prompt: str, reply: str, thinking: str, view: AssistantMessage, state: str,
                            error: str, stats: ReplyStats | None, calls: list[JSONObject]) -> None:
        self.streaming = False
        self.set_status("")
        if state == "done":
            footer = stats.summary() if stats else ""
            if stats and self.session.verbose:
                footer = "\n".join(stats.verbose_lines())
        elif state == "stopped":
            footer = f"stopped after {len(reply)} characters (kept)"
        else:
            footer = f"Error: {error}"
        await view.finish(footer, state=state)
        if state == "done" and stats is not None and stats.truncated_tokens:
            context = await model_ops.context_length(self.app.backend, self.session.model)
            self.info(stats.truncation_notice(context))
        if state == "error" and not reply and not thinking:
            # Nothing came back: give the prompt back to the editor so nothing is lost.
            prompt_input = self.query_one(PromptInput)
            if not prompt_input.text:
                prompt_input.load_text(prompt)
            return
        self.session.add_turn(prompt, reply, stopped=state != "done", thinking=thinking, tool_calls=calls)
        self.save_conversation()

    def save_conversation(self) -> None:
        try:
            self.session.save()
        except StoreError as exc:
            self.notify(f"Could not save the conversation: {exc}", severity="error")

    # ----- actions ------------------------------------------------------------------------------

    def action_stop(self) -> None:
        if self.streaming:
            self.workers.cancel_group(self, "reply")

    def action_interrupt(self) -> None:
        if self.streaming:
            self.action_stop()
            return
        focused = self.focused
        if isinstance(focused, PromptInput) and focused.selected_text:
            focused.action_copy()
        else:
            self.notify("Ctrl+Q or /bye quits.", timeout=2)

    def action_new_chat(self) -> None:
        if self.streaming:
            self.action_stop()
        self.session.new_conversation()
        self.render_conversation()

    def action_pick_model(self) -> None:
        from .dialogs import ModelPicker

        def picked(name: str | None) -> None:
            if name and model_ops.full_name(name) != model_ops.full_name(self.session.model):
                self.switch_model(name)

        self.app.push_screen(ModelPicker(self.session.model), picked)

    def action_settings(self) -> None:
        from .dialogs import SettingsDialog, SettingsResult

        def done(result: SettingsResult | None) -> None:
            if result is None:
                return
            self.session.conversation.system = result.system
            self.session.conversation.options = dict(result.options)
            self.update_title()
            self.info("Settings updated.")

        conv = self.session.conversation
        self.app.push_screen(SettingsDialog(conv.system, conv.options, self.session.defaults), done)

    def action_conversations(self) -> None:
        from .dialogs import ConversationList

        store = self.session.store
        if store is None:
            self.notify("Conversations are not saved in this session.")
            return

        def opened(conversation_id: str | None) -> None:
            if not conversation_id:
                return
            try:
                conversation = store.load(conversation_id)
            except LocalrunError as exc:
                self.notify(str(exc), severity="error")
                return
            if self.streaming:
                self.action_stop()
            self.session.conversation = conversation
            self.render_conversation()
            self.info(f"Reopened “{conversation.title or conversation.auto_title()}”.")

        self.app.push_screen(ConversationList(store, current=self.session.conversation.id), opened)

    def action_dashboard(self) -> None:
        from .dashboard import DashboardScreen

        self.app.push_screen(DashboardScreen())
