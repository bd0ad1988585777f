"""``localrun daemon status|stop|logs [-f]``: see the background daemon, stop it, read its log.

- ``status``: address, pid, version, uptime, log file, loaded models, and the settings of this
  shell that differ from the daemon's. Exit 1 when no daemon answers.
- ``stop [--grace SECONDS]``: a graceful stop (``POST /api/shutdown``): requests in flight get
  the grace to finish, then end with an error; runners exit. Waits until the process is gone.
  Exit 0 also when no daemon was running (there is nothing left to stop).
- ``logs [-f]``: this daemon's own log lines (its file from the offset it started at); ``-f``
  follows them until the daemon stops. With no daemon answering, the newest background log for
  this address is shown, so the cause of a crash can still be read.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from .. import config
from ..errors import DaemonUnavailable, LocalrunError
from ..fmt import human_duration, until
from ..jsontypes import JSONValue
from . import daemon_logs
from .connect import not_running, require_daemon, running_daemon, settings_differences

_EXIT_WAIT_S = 30.0  # after the grace: unloading models and closing connections


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("daemon", help="the background daemon: status, stop, logs",
                              description="See, stop and read the log of the localrun daemon at LOCALRUN_HOST.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("status", help="address, pid, version, uptime, log file and loaded models").set_defaults(
        func=status)
    s = sub.add_parser("stop", help="stop the daemon gracefully (its models are unloaded)")
    s.add_argument("--grace", type=_seconds, metavar="SECONDS",
                   help="how long requests in flight may still run before they end with an error "
                        "(default: the daemon's, 10)")
    s.set_defaults(func=stop)
    g = sub.add_parser("logs", help="print this daemon's log")
    g.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the daemon stops")
    g.set_defaults(func=logs)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError("must be from 0 to 3600 seconds")
    return value


def _text(value: JSONValue) -> str | None:
    return value if isinstance(value, str) else None


def status(args: argparse.Namespace) -> int:
    with require_daemon(warn=False) as client:  # the differences are part of the report
        info = client.status()
        models = client.ps()
        differences = settings_differences(client)
    rows = [("address", info.address), ("pid", str(info.pid)), ("version", info.version),
            ("uptime", human_duration(info.uptime_s)), ("log", str(info.log_file or "(not to a file)"))]
    names = [f"{m.get('name')} (until {until(_text(m.get('expires_at'))).lower()})" for m in models]
    rows.append(("models", ", ".join(names) if names else "none loaded"))
    width = max(len(k) for k, _ in rows) + 2
    print("\n".join(f"{k + ':':<{width}}{v}" for k, v in rows))
    if differences:
        print("settings that differ from this shell's (restart the daemon to apply them):")
        print("\n".join(f"  {line}" for line in differences))
    return 0


def stop(args: argparse.Namespace) -> int:
    client = running_daemon(warn=False)  # its settings no longer matter
    if client is None:
        print(f"no localrun daemon answers at {config.host().url}: nothing to stop")
        return 0
    with client:
        info = client.status()
        grace = client.shutdown(args.grace)
    if not _wait_for_exit(info.pid, grace + _EXIT_WAIT_S):
        raise DaemonUnavailable(f"the daemon (pid {info.pid}) is still running after {grace + _EXIT_WAIT_S:g}s")
    print(f"stopped the localrun daemon at {info.address} (pid {info.pid})")
    return 0


def _wait_for_exit(pid: int, timeout: float) -> bool:
    """Wait for the daemon's process to end (it stops listening first, so the port says little)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _process_alive(pid):
            return True
        time.sleep(0.1)
    return False


def logs(args: argparse.Namespace) -> int:
    client = running_daemon(warn=False)
    if client is None:
        return _last_background_log(args)
    with client:
        info = client.status()
    if not config.host().is_loopback:
        raise LocalrunError(f"the daemon at {info.address} writes its log on its own machine"
                            + (f" ({info.log_file})" if info.log_file else ""))
    if info.log_file is None:
        raise LocalrunError(f"the daemon (pid {info.pid}) does not log to a file: its output goes to the terminal "
                            "or service manager that started it")
    return _print_log(info.log_file, info.log_offset, follow=args.follow, alive=lambda: _process_alive(info.pid))


def _process_alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def _last_background_log(args: argparse.Namespace) -> int:
    found = daemon_logs.background_logs(config.host().port)
    if not found:
        raise DaemonUnavailable(not_running(config.host().url))
    print(f"(no localrun daemon answers at {config.host().url}; the log of the last one started in the background, "
          f"{found[0]}:)", file=sys.stderr)
    return _print_log(found[0], 0, follow=False, alive=lambda: False)


def _print_log(path: Path, offset: int, *, follow: bool, alive: Callable[[], bool]) -> int:
    """Print ``path`` from ``offset``; with ``follow``, keep printing until ``alive()`` turns false."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the `with handle:` below, after the error is mapped
    except OSError as exc:
        raise LocalrunError(f"cannot read the daemon's log {path}: {exc.strerror or exc}") from None
    out = sys.stdout
    with handle:
        handle.seek(offset)
        while True:
            chunk = handle.read()
            if chunk:
                out.write(chunk.decode("utf-8", errors="replace"))
                out.flush()
            if not follow:
                return 0
            if not chunk:
                if not alive():
                    rest = handle.read()  # the last lines it wrote while stopping
                    out.write(rest.decode("utf-8", errors="replace"))
                    out.flush()
                    return 0
                time.sleep(0.3)

