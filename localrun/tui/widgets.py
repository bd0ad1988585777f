"""Widgets of the chat view: the prompt editor and the messages of the conversation log.

:class:`PromptInput` is a multi-line editor where Enter sends (posting :class:`PromptInput.Submitted`)
and Ctrl+J (Shift+Enter / Alt+Enter where the terminal reports them) inserts a newline; Up/Down
on the first/last line recall earlier prompts. :class:`AssistantMessage` renders a reply as
Markdown while it streams (Textual's MarkdownStream batches fragments when they come faster than
it can draw), every newline the model wrote kept as a line break (poems, lists and code survive;
plain Markdown would join single lines), the model's reasoning in a collapsed section above the
answer, tool calls as such, and a one-line summary of timings under it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from rich.text import Text
from textual import events
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Collapsible, Label, Markdown, ProgressBar, Static, TextArea
from textual.widgets.markdown import MarkdownStream

from ..jsontypes import JSONObject

NEWLINE_KEYS = frozenset({"ctrl+j", "shift+enter", "alt+enter", "ctrl+enter"})


class PromptInput(TextArea):
    """The message editor. Enter sends; see NEWLINE_KEYS for the keys that insert a newline."""

    @dataclass
    class Submitted(Message):
        prompt_input: PromptInput
        text: str

        @property
        def control(self) -> PromptInput:
            return self.prompt_input

    def __init__(self, *, id: str | None = None, placeholder: str = "") -> None:
        super().__init__(id=id, soft_wrap=True, tab_behavior="focus", show_line_numbers=False,
                         placeholder=placeholder, compact=True)
        self.sent: list[str] = []
        self._history_pos: int | None = None
        self._draft = ""

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self, self.text))
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            start, end = self.selection
            self._replace_via_keyboard("\n", start, end)
            return
        await super()._on_key(event)

    def remember(self, text: str) -> None:
        """Add a sent prompt to the Up/Down history."""
        if text and (not self.sent or self.sent[-1] != text):
            self.sent.append(text)
        self._history_pos = None

    def action_cursor_up(self, select: bool = False) -> None:
        if select or self.cursor_location[0] > 0 or not self.sent:
            super().action_cursor_up(select)
            return
        if self._history_pos is None:
            self._draft = self.text
            self._history_pos = len(self.sent)
        if self._history_pos > 0:
            self._history_pos -= 1
            self.load_text(self.sent[self._history_pos])

    def action_cursor_down(self, select: bool = False) -> None:
        last_row = self.document.line_count - 1
        if select or self._history_pos is None or self.cursor_location[0] < last_row:
            super().action_cursor_down(select)
            return
        self._history_pos += 1
        if self._history_pos >= len(self.sent):
            self._history_pos = None
            self.load_text(self._draft)
        else:
            self.load_text(self.sent[self._history_pos])
        self.move_cursor(self.document.end)


class UserMessage(Static):
    """What the user sent, shown verbatim (no markup, no Markdown)."""

    def __init__(self, text: str, images: list[str] | None = None) -> None:
        labels = "".join(f"\n[image: {name}]" for name in images or [])
        super().__init__(Text(text + labels if text else labels.lstrip("\n")), classes="user-message")


class InfoMessage(Static):
    """Output of slash commands and notices, in the log (plain text)."""

    def __init__(self, text: str, *, error: bool = False) -> None:
        super().__init__(Text(text), classes="info-message" + (" error" if error else ""))


def reply_parser() -> MarkdownIt:
    """GitHub-flavoured Markdown where a single newline is a line break, as chat UIs render replies.

    Textual draws a soft break as a space (markdown-it's ``breaks`` option only changes its HTML
    renderer), so a core rule turns soft breaks into hard ones in the token stream itself.
    """
    parser = MarkdownIt("gfm-like")
    parser.core.ruler.push("hard_breaks", _hard_breaks)
    return parser


def _hard_breaks(state: StateCore) -> None:
    for token in state.tokens:
        for child in token.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"


def tool_call_text(call: JSONObject) -> str:
    """``get_weather({"city": "Paris"})`` for one call as /api/chat returns it."""
    fn = call.get("function")
    if not isinstance(fn, dict):
        return "?()"
    arguments = fn.get("arguments")
    shown = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)
    return f"{fn.get('name') or '?'}({shown})"


class AssistantMessage(Vertical):
    """A reply: reasoning (collapsed), Markdown body (streamed or given), tool calls, a stats line."""

    def __init__(self, text: str = "", *, model: str = "", footer: str = "", thinking: str = "",
                 tool_calls: list[JSONObject] | None = None) -> None:
        super().__init__(classes="assistant-message")
        self._initial = text
        self._footer = footer
        self._thinking = thinking
        self._calls = list(tool_calls or [])
        self.model = model
        self.border_title = model or None
        self._stream: MarkdownStream | None = None
        # Made here, not in compose: reasoning may stream in before the section is mounted.
        self._thinking_text = Static(Text(thinking), classes="thinking-text")
        self._thinking_section = Collapsible(self._thinking_text, title="Thinking", collapsed=True,
                                             classes="reply-thinking")
        self._thinking_section.display = bool(thinking)

    def compose(self):  # type: ignore[no-untyped-def]
        yield self._thinking_section
        yield Markdown(self._initial, classes="reply-body", parser_factory=reply_parser)
        for call in self._calls:
            yield Static(Text(f"→ tool call: {tool_call_text(call)}"), classes="tool-call")
        yield Label(Text(self._footer), classes="reply-stats")

    def start_stream(self) -> None:
        self.add_class("streaming")
        self._stream = Markdown.get_stream(self.query_one(Markdown))

    async def write(self, fragment: str) -> None:
        if self._stream is not None:
            await self._stream.write(fragment)

    def write_thinking(self, fragment: str) -> None:
        """Add reasoning text to the collapsed section (shown, still collapsed, once there is some)."""
        self._thinking += fragment
        self._thinking_section.display = True
        self._thinking_section.title = "Thinking…" if self.has_class("streaming") else "Thinking"
        self._thinking_text.update(Text(self._thinking))

    async def add_tool_call(self, call: JSONObject) -> None:
        """Show one tool call the model made, under the answer text."""
        self._calls.append(call)
        await self.mount(Static(Text(f"→ tool call: {tool_call_text(call)}"), classes="tool-call"),
                         before=self.query_one(".reply-stats"))

    @property
    def thinking(self) -> str:
        return self._thinking

    async def finish(self, footer: str, *, state: str = "done") -> None:
        """End streaming; ``state`` is done, stopped or error (a CSS class of the same name)."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            # Let the stream's task start before stopping it: cancelling a task that never ran
            # would raise CancelledError here (an error reply can end before the first chunk).
            await asyncio.sleep(0)
            try:
                await stream.stop()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
        self.remove_class("streaming")
        self.add_class(state)
        self._thinking_section.title = "Thinking"
        self._footer = footer
        self.query_one(".reply-stats", Label).update(Text(footer))

    @property
    def footer(self) -> str:
        return self._footer


class PullProgress(Vertical):
    """One model download: a status line and a progress bar (indeterminate until a total is known)."""

    def __init__(self, model: str) -> None:
        super().__init__(classes="pull-progress")
        self.model = model

    def compose(self):  # type: ignore[no-untyped-def]
        yield Label(Text(f"pulling {self.model}"), classes="pull-status")
        yield ProgressBar(total=None, show_eta=True)

    def update_from(self, status: str, completed: float | None, total: float | None) -> None:
        self.query_one(".pull-status", Label).update(Text(f"{self.model}: {status}"))
        bar = self.query_one(ProgressBar)
        if total:
            bar.update(total=total, progress=completed or 0)
