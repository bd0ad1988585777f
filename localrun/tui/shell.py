"""What the screens share, as the base of the Textual application (:mod:`localrun.tui.app`).

The screens type ``self.app`` as :class:`LocalrunShell`, so they do not import the application
that pushes them (no import circle). :class:`LocalrunShell` owns what the screens share: the
:class:`~localrun.tui.backend.DaemonApi`, the
connection state (a reactive ``connected``, watched by the screens), the downloads in progress
(``pulls``) and the conversation store. A health check every ``health_interval`` seconds notices
a daemon that went away or restarted, says so, and (when the app was given ``restart_daemon``,
as ``localrun run`` does for a local daemon) starts a new one after a few failed checks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.reactive import reactive

from ..errors import LocalrunError
from .backend import DaemonApi
from .conversations import ConversationStore
from .session import ChatSession

log = logging.getLogger(__name__)

# Failed health checks in a row before the app starts a new daemon itself.
RESTART_AFTER_FAILURES = 3


@dataclass(slots=True)
class PullState:
    """A download this app started: the latest status line and byte counts from /api/pull."""

    model: str
    status: str = "starting"
    completed: float | None = None
    total: float | None = None
    done: bool = False
    error: str | None = None


class LocalrunShell(App[int]):
    """``mode`` is ``"chat"`` (needs ``session``) or ``"top"`` (dashboard only; q quits)."""

    CSS_PATH = Path(__file__).with_name("localrun.tcss")
    TITLE = "localrun"
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", priority=True)]
    ENABLE_COMMAND_PALETTE = False

    connected: reactive[bool] = reactive(True)

    def __init__(
        self,
        backend: DaemonApi,
        *,
        session: ChatSession | None = None,
        mode: str = "chat",
        conversations: ConversationStore | None = None,
        restart_daemon: Callable[[], object] | None = None,
        health_interval: float = 2.0,
        refresh_interval: float = 1.0,
    ) -> None:
        super().__init__()
        if mode == "chat" and session is None:
            raise ValueError("chat mode needs a session")
        self.backend = backend
        self.session = session
        self.mode = mode
        self.conversations = conversations
        self.restart_daemon = restart_daemon
        self.health_interval = health_interval
        self.refresh_interval = refresh_interval
        self.pulls: dict[str, PullState] = {}
        self._failures = 0
        self._uptime: float | None = None
        self._restarting = False

    def start_health_checks(self) -> None:
        """Check the daemon every ``health_interval`` seconds (none when it is 0)."""
        if self.health_interval > 0:
            self.set_interval(self.health_interval, self.check_health)

    def connection_lost(self) -> None:
        """A request just failed with DaemonUnavailable: say so now, and keep checking."""
        if self.connected:
            self.connected = False
            self.notify(f"Lost the daemon at {self.backend.base_url}; reconnecting…", severity="warning",
                        timeout=4)
        self.check_health()

    @work(exclusive=True, group="health")
    async def check_health(self) -> None:
        try:
            health = await self.backend.health()
        except LocalrunError:
            self._failures += 1
            if self.connected:
                self.connected = False
                self.notify(f"Lost the daemon at {self.backend.base_url}; reconnecting…",
                            severity="warning", timeout=4)
            if self.restart_daemon is not None and self._failures >= RESTART_AFTER_FAILURES \
                    and not self._restarting:
                self.start_daemon()
            return
        self._failures = 0
        uptime = health.get("uptime_seconds")
        restarted = (isinstance(uptime, (int, float)) and self._uptime is not None and uptime < self._uptime)
        self._uptime = float(uptime) if isinstance(uptime, (int, float)) else None
        if not self.connected:
            self.connected = True
            self.notify(f"Reconnected to the daemon at {self.backend.base_url}", timeout=4)
        elif restarted:
            self.notify("The daemon restarted: models load again on the next message", timeout=4)

    @work(thread=True, exclusive=True, group="restart")
    def start_daemon(self) -> None:
        """Start a new local daemon in the background (blocking call, so in a thread)."""
        assert self.restart_daemon is not None
        self._restarting = True
        self.call_from_thread(self.notify, "Starting a new localrun daemon…", timeout=4)
        try:
            self.restart_daemon()
        except Exception as exc:  # shown, not raised: the UI must stay up
            log.warning("could not restart the daemon: %s", exc)
            self.call_from_thread(self.notify, f"Could not start the daemon: {str(exc).splitlines()[0]}",
                                  severity="error", timeout=8)
        finally:
            self._failures = 0  # the next attempt waits for a few more failed checks
            self._restarting = False

    async def on_unmount(self) -> None:
        try:
            await self.backend.aclose()
        except Exception:  # closing a dead connection must not hide the real exit
            log.debug("closing the backend failed", exc_info=True)
