"""Modal dialogs of the chat: model picker, system prompt + parameter editor, saved conversations.

Each is a ``ModalScreen[T]`` that dismisses with its result (``None`` on Esc), so the chat
screen gets it through the ``push_screen`` callback.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual import getters, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, TextArea
from textual.widgets.option_list import Option

from ..errors import LocalrunError
from ..fmt import human_bytes
from ..jsontypes import JSONObject, as_number
from . import commands as cmd
from .conversations import ConversationStore
from .model_ops import full_name
from .shell import LocalrunShell

# Parameters the editor shows as fields, in this order; others set by /set stay as they are.
EDITABLE = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "num_ctx", "num_predict", "seed", "stop")


class ModelPicker(ModalScreen[str | None]):
    """Pick a model from the store, or type any name (a missing one is pulled)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    app = getters.app(LocalrunShell)  # it only ever runs inside LocalrunApp

    def __init__(self, current: str) -> None:
        super().__init__(classes="dialog-screen")
        self.current = current
        self.names: list[str] = []
        self._models: list[JSONObject] = []  # the store's models, once listed
        self._loaded: set[object] = set()

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="model-picker"):
            yield Label("Pick a model", classes="dialog-title")
            yield Input(placeholder="filter, or type a name to pull and load", id="model-filter")
            yield OptionList(id="model-list")
            yield Label("Enter loads · Esc cancels", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#model-filter", Input).focus()
        self.load_models()

    @work(exclusive=True)
    async def load_models(self) -> None:
        option_list = self.query_one("#model-list", OptionList)
        try:
            models = await self.app.backend.list()
            loaded: set[object] = {m.get("name") for m in await self.app.backend.ps()}
        except LocalrunError as exc:
            option_list.add_option(Option(Text(f"cannot list models: {exc}"), disabled=True))
            return
        self._models = sorted(models, key=lambda m: str(m.get("name")))
        self._loaded = loaded
        self.names = [str(m.get("name")) for m in self._models]
        self.refill("")

    def refill(self, needle: str) -> None:
        option_list = self.query_one("#model-list", OptionList)
        option_list.clear_options()
        for model in self._models:
            name = str(model.get("name"))
            if needle and needle.lower() not in name.lower():
                continue
            marks = []
            if full_name(name) == full_name(self.current):
                marks.append("current")
            if name in self._loaded:
                marks.append("loaded")
            size = human_bytes(as_number(model.get("size")) or 0.0)
            label = Text(f"{name:<32} {size:>9}  {', '.join(marks)}".rstrip())
            option_list.add_option(Option(label, id=name))
        if option_list.option_count:
            option_list.highlighted = 0

    @on(Input.Changed, "#model-filter")
    def filter_changed(self, event: Input.Changed) -> None:
        self.refill(event.value.strip())

    @on(Input.Submitted, "#model-filter")
    def filter_submitted(self, event: Input.Submitted) -> None:
        option_list = self.query_one("#model-list", OptionList)
        typed = event.value.strip()
        if typed in self.names or (typed and option_list.option_count == 0):
            self.dismiss(typed)
        elif option_list.highlighted is not None and option_list.option_count:
            self.dismiss(option_list.get_option_at_index(option_list.highlighted).id)
        elif typed:
            self.dismiss(typed)

    @on(OptionList.OptionSelected, "#model-list")
    def selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def on_key(self, event: Any) -> None:
        # Up/Down in the filter box move the highlight in the list.
        if event.key in ("up", "down") and self.focused is self.query_one("#model-filter"):
            option_list = self.query_one("#model-list", OptionList)
            option_list.action_cursor_down() if event.key == "down" else option_list.action_cursor_up()
            event.stop()

    def action_cancel(self) -> None:
        self.dismiss(None)


@dataclass(frozen=True, slots=True)
class SettingsResult:
    system: str | None
    options: JSONObject = field(default_factory=dict)


class SettingsDialog(ModalScreen[SettingsResult | None]):
    """Edit the system prompt and the common parameters; values are checked before closing."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "save", "Save")]

    def __init__(self, system: str | None, options: JSONObject, defaults: JSONObject | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.system = system or ""
        self.options = dict(options)
        self.defaults = dict(defaults or {})  # the model's real defaults, shown in empty fields

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="settings"):
            yield Label("System prompt and parameters", classes="dialog-title")
            yield Label("System prompt")
            yield TextArea(self.system, id="system", soft_wrap=True)
            with Horizontal(id="params"):
                for name in EDITABLE:
                    value = self.options.get(name)
                    text = (" ".join(map(str, value)) if isinstance(value, list)
                            else ("" if value is None else str(value)))
                    with Vertical(classes="param"):
                        yield Label(name)
                        yield Input(text, id=f"param-{name}", placeholder=self.placeholder(name), compact=True)
            yield Label("", id="settings-error")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")
            yield Label("Empty field = the model's default (shown grey) · Ctrl+S saves · Esc cancels",
                        classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#system", TextArea).focus()

    def placeholder(self, name: str) -> str:
        """An empty field shows what the model uses then: its real default (``0.7``), not a word."""
        value = self.defaults.get(name)
        if value is None or value == [] or value == "":
            return "model default" if name not in self.defaults else "none"
        if isinstance(value, list):
            return " ".join(str(v) for v in value)
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)

    def collect(self) -> SettingsResult:
        """The edited settings; raises InvalidRequest naming the first bad field."""
        options = {k: v for k, v in self.options.items() if k not in EDITABLE}
        for name in EDITABLE:
            raw = self.query_one(f"#param-{name}", Input).value.strip()
            if raw:
                value = cmd.parse_parameter(name, raw)
                options[name] = [*value] if isinstance(value, list) else value
        system = self.query_one("#system", TextArea).text.strip() or None
        return SettingsResult(system, options)

    @on(Button.Pressed, "#save")
    def action_save(self) -> None:
        try:
            result = self.collect()
        except LocalrunError as exc:
            self.query_one("#settings-error", Label).update(Text(str(exc)))
            return
        self.dismiss(result)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class ConversationList(ModalScreen[str | None]):
    """Saved conversations, newest first: Enter reopens, Delete removes."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("delete", "delete", "Delete")]

    def __init__(self, store: ConversationStore, current: str | None = None) -> None:
        super().__init__(classes="dialog-screen")
        self.store = store
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="conversations"):
            yield Label("Saved conversations", classes="dialog-title")
            yield OptionList(id="conversation-list")
            yield Label("Enter reopens · Delete removes · Esc cancels", classes="dialog-hint")

    def on_mount(self) -> None:
        self.refill()
        self.query_one(OptionList).focus()

    def refill(self) -> None:
        option_list = self.query_one(OptionList)
        option_list.clear_options()
        for item in self.store.list():
            when = dt.datetime.fromtimestamp(item.updated_at).strftime("%Y-%m-%d %H:%M")
            mark = " ·open" if item.id == self.current else ""
            title = item.title if len(item.title) <= 26 else item.title[:25] + "…"
            model = item.model if len(item.model) <= 14 else item.model[:13] + "…"
            label = Text(f"{when}  {title:<26}  {model:<14}  {item.num_messages:>3} msgs{mark}")
            option_list.add_option(Option(label, id=item.id))
        if not option_list.option_count:
            option_list.add_option(Option(Text("No saved conversations yet."), disabled=True))
        else:
            option_list.highlighted = 0

    @on(OptionList.OptionSelected)
    def selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_delete(self) -> None:
        option_list = self.query_one(OptionList)
        if option_list.highlighted is None:
            return
        option = option_list.get_option_at_index(option_list.highlighted)
        if option.id is None or option.id == self.current:
            self.notify("The open conversation cannot be deleted here.", timeout=3)
            return
        try:
            self.store.delete(option.id)
        except LocalrunError as exc:
            self.notify(str(exc), severity="error")
        self.refill()

    def action_cancel(self) -> None:
        self.dismiss(None)
