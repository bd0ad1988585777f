"""Ollama's slash commands, executed on the chat screen (a mixin of :class:`~localrun.tui.chat.ChatScreen`).

:mod:`localrun.tui.commands` decides what a line means; this module does it: session settings
change at once, and daemon calls (/show, /load with a pull when missing, /save) run in workers
of the ``model`` group, so the screen stays responsive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work
from textual.containers import VerticalScroll

from ..errors import LocalrunError
from . import commands as cmd
from . import model_ops
from .widgets import PullProgress, UserMessage

if TYPE_CHECKING:
    from .session import ChatSession
    from .shell import LocalrunShell


class SlashCommands:
    """Needs from its screen: ``session``, ``app``, ``query_one``, ``info``, ``update_title``, ``action_new_chat``,
    ``learn_model``."""

    if TYPE_CHECKING:  # provided by ChatScreen and Screen; declared here for the type checker only
        session: ChatSession
        @property
        def app(self) -> LocalrunShell: ...

        def query_one(self, *args: Any, **kwargs: Any) -> Any: ...

        def info(self, text: str, *, error: bool = False) -> None: ...

        def update_title(self) -> None: ...

        def action_new_chat(self) -> None: ...

        def attach(self, paths: list[str]) -> bool: ...

        async def learn_model(self, model: str) -> None: ...

    def run_command(self, line: str) -> None:
        self.query_one("#log", VerticalScroll).mount(UserMessage(line))
        try:
            command = cmd.parse(line)
        except LocalrunError as exc:
            self.info(str(exc), error=True)
            return
        s = self.session
        match command:
            case cmd.Help(text):
                self.info(text)
            case cmd.Bye():
                self.app.exit(0)
            case cmd.Clear():
                self.action_new_chat()
                self.info("Cleared session context.")
            case cmd.ListParameters():
                self.info(cmd.HELP_SET)
            case cmd.SetParameter(name, value):
                s.set_parameter(name, value)
                self.info(f"Set parameter '{name}' to '{cmd.format_parameter_value(value)}'")
            case cmd.SetSystem(text):
                s.conversation.system = text
                self.info("Set system message." if text else "Cleared system message.")
            case cmd.SetFormat(fmt):
                s.format = fmt
                self.info("Set format to 'json' mode." if fmt else "Disabled format.")
            case cmd.SetVerbose(verbose):
                s.verbose = verbose
                self.info("Set 'verbose' mode." if verbose else "Set 'quiet' mode.")
            case cmd.SetHistory(keep):
                s.keep_history = keep
                self.info("Set history." if keep else "Set 'nohistory' mode.")
            case cmd.SetThink(think) if think and not s.thinking:
                self.info(f"{s.model} does not support thinking: 'think' mode not set.", error=True)
            case cmd.SetThink(think):
                s.think = think
                self.info(f"Set 'think' mode to '{think}'." if isinstance(think, str)
                          else "Set 'think' mode." if think else "Set 'nothink' mode.")
            case cmd.SetHideThinking(hide):
                s.hide_thinking = hide
                self.info("Set 'hidethinking' mode." if hide else "Set 'nohidethinking' mode.")
            case cmd.Show(topic):
                self.show(topic)
            case cmd.Load(model):
                self.switch_model(model)
            case cmd.Save(name):
                self.save_model(name)
            case cmd.AttachImage(path):
                self.attach([path])
        self.update_title()

    @work(exclusive=True, group="model")
    async def show(self, topic: str) -> None:
        try:
            info = await self.app.backend.show(self.session.model)
        except LocalrunError as exc:
            self.info(f"Couldn't get model info: {exc}", error=True)
            return
        conv = self.session.conversation
        self.info(cmd.show_text(topic, info, conv.system, conv.options))

    @work(exclusive=True, group="model")
    async def switch_model(self, model: str) -> None:
        log = self.query_one("#log", VerticalScroll)
        self.info(f"Loading model '{model}'")
        progress: PullProgress | None = None

        def on_progress(status: str, completed: float | None, total: float | None) -> None:
            nonlocal progress
            if progress is None:
                progress = PullProgress(model)
                log.mount(progress)
            pulls = self.app.pulls
            from .shell import PullState

            previous = pulls.get(model)
            if total is None and previous is not None:  # status-only lines keep the last byte counts
                completed, total = previous.completed, previous.total
            pulls[model] = PullState(model, status, completed, total)
            if progress.is_mounted:
                progress.update_from(status, completed, total)

        try:
            await model_ops.ensure_loaded(self.app.backend, model, on_progress,
                                          self.session.keep_alive)
        except LocalrunError as exc:
            self.info(f"Couldn't load '{model}': {exc}", error=True)
            return
        finally:
            state = self.app.pulls.get(model)
            if state is not None:
                state.done = True
        self.session.conversation.model = model
        self.update_title()
        self.info(f"Now chatting with {model}.")
        try:
            await self.learn_model(model)
        except LocalrunError as exc:
            self.info(f"Couldn't get model info: {exc}", error=True)

    @work(exclusive=True, group="model")
    async def save_model(self, name: str) -> None:
        conv = self.session.conversation
        modelfile = cmd.save_modelfile(conv.model, conv.system, conv.options, conv.messages)
        try:
            await model_ops.create(self.app.backend, name, modelfile)
        except LocalrunError as exc:
            self.info(f"Couldn't save model '{name}': {exc}", error=True)
            return
        self.info(f"Created new model '{name}'")
