"""``localrun serve``: run the daemon in the foreground (Ctrl-C stops it gracefully and unloads models).

With ``--log-file PATH`` its output (log lines, and anything a crash prints) goes to PATH instead of
the terminal; ``localrun run`` starts background daemons that way, one file per start. The daemon
reports where its output goes (``GET /api/status``), for ``localrun daemon logs``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path

from .. import config
from ..errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("serve", help="run the localrun daemon (Ollama- and OpenAI-compatible APIs)")
    p.add_argument("--host", help="host:port to listen on (default: LOCALRUN_HOST, 127.0.0.1:11435)")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default: LOCALRUN_LOG_LEVEL, else INFO; "
                                       "prompts are only logged at DEBUG)")
    p.add_argument("--log-file", metavar="PATH", help="append the daemon's output to PATH instead of the terminal")
    p.set_defaults(func=run)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per upstream request or health check


def redirect_output(path: Path) -> int:
    """Send this process's stdout and stderr (and its runners') to ``path``; returns the offset its lines start at."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    offset = os.fstat(fd).st_size
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return offset


def output_file() -> tuple[Path | None, int]:
    """The regular file stderr writes to (a service's log), and its size now; (None, 0) for a terminal or pipe."""
    try:
        if not os.path.isfile(f"/proc/self/fd/{sys.stderr.fileno()}"):  # Linux; elsewhere: not known
            return None, 0
        path = Path(os.readlink(f"/proc/self/fd/{sys.stderr.fileno()}"))
        return path, os.fstat(sys.stderr.fileno()).st_size
    except (OSError, ValueError):
        return None, 0


def run(args: argparse.Namespace) -> int:
    if args.host:
        os.environ["LOCALRUN_HOST"] = args.host
    if args.log_level:
        os.environ["LOCALRUN_LOG_LEVEL"] = args.log_level
    try:
        settings = config.load_settings()
    except ConfigError as exc:
        if args.log_level and "LOCALRUN_LOG_LEVEL" in str(exc):
            raise ConfigError(f"--log-level {args.log_level!r}: expected DEBUG, INFO, WARNING or ERROR") from None
        raise
    from ..server.app import serve
    from ..server.lifecycle import DaemonInfo

    log_file: Path | None
    if args.log_file:
        log_file = Path(args.log_file).expanduser().resolve()
        offset = redirect_output(log_file)
    else:
        log_file, offset = output_file()
    setup_logging(settings.log_level)
    daemon = DaemonInfo(pid=os.getpid(), started_at=time.time(), log_file=log_file, log_offset=offset)
    try:
        asyncio.run(serve(settings, daemon=daemon))
    except OSError as exc:
        print(f"Error: cannot listen on {settings.host.url}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
