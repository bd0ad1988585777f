"""The suite's 5xx guard (issue #26 point 7): a test fails when a daemon it started answered a 5xx or
logged an unhandled exception, unless the test is marked ``@pytest.mark.allow_5xx(reason=...)``.

What it sees, per test (``tests/conftest.py``'s autouse ``no_5xx`` fixture opens and closes a window):

- in-process daemons (aiohttp TestServer apps, anything the test runs in this process): a logging
  handler on the root logger for the test's duration. It keeps the daemon's
  ``METHOD PATH answered 5NN`` line (``server/middleware.py`` logs one for every 5xx it answers) and
  every record at ERROR or above that carries a traceback from localrun: logged by a ``localrun``
  logger (a handler's ``log.exception``), or raised through localrun's code (aiohttp's "Error
  handling request", asyncio's "Task exception was never retrieved"); a test's own stand-in server
  or client is not the daemon.
- daemons in child processes (``LiveDaemon``, ``servedaemon.Daemon``, a background daemon ``localrun
  run`` started): their log files, from the size each had when the test began. The same two signs,
  as text: the ``answered 5NN`` line, and ``Traceback (most recent call last)``. A runner's output
  goes to its daemon's stderr, so a child daemon's runners are read with it. An in-process app's
  runners write to the test's stderr, which this does not read; what they fail reaches the daemon as
  a 5xx (an internal error, or a crashed runner) and is seen there.

Helpers that start a child daemon call :func:`watch_log` with its log file; background daemons are
found in the test's log dir (``config.log_dir()``) at the end of the test.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ANSWERED_5XX = re.compile(r"^\S+ \S+ answered 5\d\d\b")  # server/middleware.py's line, the message only
_LOG_5XX = re.compile(r"localrun\.server\.middleware: \S+ \S+ answered 5\d\d\b")  # the same in a log file
_TRACEBACK = "Traceback (most recent call last)"
_TRACEBACK_LINES = 24  # how much of a traceback a finding quotes

_watched: dict[Path, int] = {}  # child daemons' log files -> bytes already attributed to a test


def watch_log(path: Path) -> None:
    """Read ``path`` (a child daemon's log) at the end of every test from now on, from its size now."""
    _watched[path] = _size(path)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def findings_in_text(text: str, where: str) -> list[str]:
    """A daemon log's 5xx lines and tracebacks (each with the lines that follow it), as findings."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if _LOG_5XX.search(line):
            found.append(f"{where}: {line.strip()}")
        elif _TRACEBACK in line:
            found.append(f"{where}:\n" + "\n".join(lines[max(0, i - 1):i + _TRACEBACK_LINES]))
    return found


class _Catcher(logging.Handler):
    """Keeps the in-process records that show a 5xx answered or an unhandled exception."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a bad format is not the guard's business
            return
        answered_5xx = record.name == "localrun.server.middleware" and ANSWERED_5XX.match(message)
        unhandled = record.levelno >= logging.ERROR and record.exc_info and _daemons(record)
        if not (answered_5xx or unhandled):
            return
        finding = f"in-process {record.name}: {message}"
        if record.exc_info:
            text = logging.Formatter().formatException(record.exc_info)
            finding += "\n" + "\n".join(text.splitlines()[-_TRACEBACK_LINES:])
        self.found.append(finding)


def _daemons(record: logging.LogRecord) -> bool:
    """Whether an exception record is the daemon's: logged by localrun, or raised through localrun's
    code (aiohttp's "Error handling request", asyncio's "Task exception was never retrieved"). A test's
    own stand-in server failing, or its client closed after its event loop, is not the daemon's."""
    if record.name.startswith("localrun"):
        return True
    tb = record.exc_info[2] if record.exc_info else None
    while tb is not None:
        if f"{os.sep}localrun{os.sep}" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


@contextmanager
def window(log_dir: Callable[[], Path]) -> Iterator[list[str]]:
    """Watch one test: yields the list that, once the block ends, holds everything seen during it.

    ``log_dir()``, asked at the end: where background daemons the test started wrote their logs.
    """
    for path in _watched:
        _watched[path] = _size(path)
    catcher = _Catcher()
    root = logging.getLogger()
    root.addHandler(catcher)
    found: list[str] = []
    try:
        yield found
    finally:
        root.removeHandler(catcher)
        found.extend(catcher.found)
        for path, offset in list(_watched.items()):
            data = _read(path, offset)
            _watched[path] = offset + len(data)
            found.extend(findings_in_text(data.decode("utf-8", errors="replace"), str(path)))
        background = log_dir()
        if background.is_dir():
            for path in sorted(background.glob("*.log")):
                if path not in _watched:
                    found.extend(findings_in_text(_read(path, 0).decode("utf-8", errors="replace"), str(path)))


def _read(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return b""
