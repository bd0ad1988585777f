"""Daemon log files: one per background start, and reading one daemon's own lines.

``localrun run`` starts a background daemon with ``serve --log-file`` pointing at a new file
``<log dir>/serve-<port>-<YYYYmmdd-HHMMSS-mmm>.log``, so a failed start shows only that attempt's
lines and ``localrun daemon logs`` shows only that daemon's. The newest :data:`KEEP` such files
are kept. A service (``localrun service install``) appends every start to ``server.log``
instead; the daemon reports the byte offset its own lines start at (``GET /api/status``).
"""

from __future__ import annotations

import time
from pathlib import Path

from .. import config

KEEP = 10  # background logs kept, all ports together
_PREFIX = "serve-"


def new_background_log(port: int) -> Path:
    """A fresh log path for a daemon about to start in the background on ``port``; prunes old ones."""
    folder = config.log_dir()
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now * 1000) % 1000:03d}"
    path = folder / f"{_PREFIX}{port}-{stamp}.log"
    for old in sorted(folder.glob(f"{_PREFIX}*.log"), key=_mtime, reverse=True)[KEEP - 1:]:
        old.unlink(missing_ok=True)
    return path


def background_logs(port: int) -> list[Path]:
    """The background logs of daemons started on ``port``, newest first."""
    return sorted(config.log_dir().glob(f"{_PREFIX}{port}-*.log"), key=_mtime, reverse=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def read_from(path: Path, offset: int = 0) -> str:
    """The text of ``path`` from byte ``offset`` (a daemon's own section), undecodable bytes replaced."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", errors="replace")


def excerpt(text: str, max_lines: int = 20) -> list[str]:
    """The last ``max_lines`` whole lines of ``text`` (a line cut in the middle is never shown)."""
    lines = text.splitlines()
    return lines[-max_lines:]
