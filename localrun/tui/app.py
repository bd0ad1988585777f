"""The Textual application: the chat (``localrun run``) or the dashboard alone (``localrun top``).

:class:`LocalrunApp` is :class:`~localrun.tui.shell.LocalrunShell` (the state the screens share)
plus the first screen it shows.
"""

from __future__ import annotations

from .chat import ChatScreen
from .dashboard import TopScreen
from .shell import LocalrunShell, PullState

__all__ = ["LocalrunApp", "PullState"]


class LocalrunApp(LocalrunShell):
    """``mode`` is ``"chat"`` (needs ``session``) or ``"top"`` (dashboard only; q quits)."""

    def on_mount(self) -> None:
        if self.mode == "top":
            self.push_screen(TopScreen())
        else:
            assert self.session is not None
            self.push_screen(ChatScreen(self.session))
        self.start_health_checks()
