"""Widgets of the chat view: the prompt editor and the messages of the conversation log.

:class:`PromptInput` is a multi-line editor where Enter sends (posting :class:`PromptInput.Submitted`)
and Ctrl+J (Shift+Enter / Alt+Enter where the terminal reports them) inserts a newline; Up/Down
on the first/last line recall earlier prompts. :class:`AssistantMessage` renders a reply as
Markdown while it streams (Textual's MarkdownStream batches fragments when they come faster than
it can draw) and shows a one-line summary of timings under it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Label, Markdown, ProgressBar, Static, TextArea
from textual.widgets.markdown import MarkdownStream

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

    def __init__(self, text: str) -> None:
        super().__init__(Text(text), classes="user-message")


class InfoMessage(Static):
    """Output of slash commands and notices, in the log (plain text)."""

    def __init__(self, text: str, *, error: bool = False) -> None:
        super().__init__(Text(text), classes="info-message" + (" error" if error else ""))


class AssistantMessage(Vertical):
    """A reply: Markdown body (streamed or given) and a stats line under it."""

    def __init__(self, text: str = "", *, model: str = "", footer: str = "") -> None:
        super().__init__(classes="assistant-message")
        self._initial = text
        self._footer = footer
        self.model = model
        self.border_title = model or None
        self._stream: MarkdownStream | None = None

    def compose(self):  # type: ignore[no-untyped-def]
        yield Markdown(self._initial, classes="reply-body")
        yield Label(Text(self._footer), classes="reply-stats")

    def start_stream(self) -> None:
        self.add_class("streaming")
        self._stream = Markdown.get_stream(self.query_one(Markdown))

    async def write(self, fragment: str) -> None:
        if self._stream is not None:
            await self._stream.write(fragment)

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
