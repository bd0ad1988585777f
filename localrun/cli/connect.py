"""How CLI commands reach the daemon, and what they tell the user about it on the way.

- :func:`connect`: a client of the daemon at LOCALRUN_HOST, starting one in the background when
  none answers and the host is local (``run``), saying so on stderr;
- :func:`ensure_daemon`: starts ``localrun serve`` in the background (detached, logging to a file
  of its own, :mod:`.daemon_logs`) when none answers; the TUI's restart uses it too;
- :func:`running_daemon`: a client, or None when none answers (store commands then use the store);
- :func:`require_daemon`: a client, or DaemonUnavailable with the hint to start one (``ps``, ``bench``);
- each warns on stderr when a ``LOCALRUN_*`` value set in this shell differs from the running
  daemon's: the daemon keeps the settings it started with.

Settings were validated before any command ran (``main`` calls ``config.load_settings()``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import config
from ..client import Client
from ..errors import DaemonUnavailable, LocalrunError
from . import daemon_logs

# Compared only when set here: the host is how this shell found the daemon, and a key it lacks or
# has in excess shows up as a 401 or not at all.
_NOT_COMPARED = ("LOCALRUN_HOST", "LOCALRUN_API_KEY")


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def not_running(url: str) -> str:
    return (f"no localrun daemon answers at {url}; start one with `localrun serve` "
            "(or `localrun run`, which starts it in the background)")


def connect() -> Client:
    """A client of a running daemon, starting one in the background first when none answers."""
    client = Client()
    if client.is_running():
        warn_about_settings(client)
        return client
    client.close()
    if not config.host().is_loopback:
        raise DaemonUnavailable(f"no localrun daemon answers at {config.host().url}")
    return ensure_daemon(on_start=lambda log: _err(f"Starting the localrun daemon in the background (log: {log})…"))


def running_daemon(*, warn: bool = True) -> Client | None:
    """A client of the running daemon, or None when none answers. ``warn``: about differing settings."""
    client = Client()
    if client.is_running():
        if warn:
            warn_about_settings(client)
        return client
    client.close()
    return None


def require_daemon(*, warn: bool = True) -> Client:
    """A client of the running daemon; raises DaemonUnavailable saying how to start one."""
    client = running_daemon(warn=warn)
    if client is None:
        raise DaemonUnavailable(not_running(config.host().url))
    return client


def settings_differences(client: Client) -> list[str]:
    """``NAME=VALUE here, OTHER in the daemon`` for each variable set here that the daemon has otherwise."""
    try:
        theirs = client.status().settings
    except LocalrunError:  # an older daemon without /api/status: nothing to compare
        return []
    mine = config.load_settings().report()
    return [f"{name}={mine[name]} here, {theirs[name] or '(unset)'} in the daemon"
            for name in config.explicit_variables()
            if name not in _NOT_COMPARED and name in theirs and mine[name] != theirs[name]]


def warn_about_settings(client: Client) -> None:
    differences = settings_differences(client)
    if differences:
        _err("Warning: the running daemon keeps the settings it was started with; these differ from this shell's:\n"
             + "".join(f"  {line}\n" for line in differences)
             + "Restart it to apply them: `localrun daemon stop`, then run the command again.")


def warn_about_unknown_variables() -> None:
    """Name ``LOCALRUN_*`` variables localrun does not read (a typo silently does nothing otherwise)."""
    for name, near in config.unknown_variables():
        hint = f" (did you mean {near}?)" if near else ""
        _err(f"Warning: {name} is not a localrun setting{hint}; it is ignored")


def ensure_daemon(timeout: float = 30.0, *, on_start: Callable[[Path], None] | None = None) -> Client:
    """A client of a running daemon, starting ``localrun serve`` in the background if none answers.

    Only for a local LOCALRUN_HOST (a remote daemon cannot be started from here). The new daemon
    logs to a file of its own (``on_start`` is told which, before it starts). Raises
    DaemonUnavailable quoting that file's last lines when it does not come up in ``timeout``.
    """
    client = Client()
    if client.is_running():
        return client
    host = config.host()
    if not host.is_loopback:
        raise DaemonUnavailable(f"no localrun daemon answers at {client.base_url}")
    log_path = daemon_logs.new_background_log(host.port)
    if on_start is not None:
        on_start(log_path)
    with open(log_path, "ab") as log_file:
        kwargs: dict[str, Any] = {}  # Popen's platform-only keywords, not JSON (typeshed has no type for them)
        if os.name == "nt":
            kwargs["creationflags"] = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]
        else:
            kwargs["start_new_session"] = True
        process = subprocess.Popen(
            [sys.executable, "-m", "localrun", "serve", "--log-file", str(log_path)],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, close_fds=True, **kwargs,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.is_running():
            return client
        if process.poll() is not None:
            break
        time.sleep(0.1)
    try:
        lines = daemon_logs.excerpt(daemon_logs.read_from(log_path))
    except OSError:
        lines = []
    said = "".join(f"\n  {line}" for line in lines) if lines else "\n  (it wrote nothing)"
    waited = "" if process.poll() is not None else f" within {timeout:g}s"
    client.close()
    raise DaemonUnavailable(f"could not start the localrun daemon at {client.base_url}{waited}; "
                            f"its log says:{said}\n(full log: {log_path})")
