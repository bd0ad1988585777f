"""Timestamps through the serving path, for profiling: ``LOCALRUN_TRACE=DIR`` (:func:`config.trace_dir`).

Off by default; :func:`mark` then returns after one global lookup. When the daemon or a runner
starts with the setting, :func:`configure` makes every :func:`mark` append ``(t_ns, stage, key,
value)`` in memory, written as JSON lines to ``DIR/trace-<pid>.jsonl`` when 20,000 have piled up
and at exit. ``t_ns`` is ``time.monotonic_ns()`` (CLOCK_MONOTONIC, one clock for every process
on Linux), so a daemon's marks and its runners' marks line up. ``benchmarks/trace_report.py`` joins the
files and prints where the time goes.

Keys, so the three layers can be joined:
- the daemon marks a request's HTTP stages under a per-request key (:func:`request_key`, a context
  variable set by the first mark of a handler), and links it to the runner with stage ``sent``
  whose value is ``"<runner pid>:<runner request id>"``;
- a runner marks under its request id and links it to the engine's with stage ``submitted``;
- the engine marks a request's stages under its own request id, and its steps under key 0.
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import json
import os
import signal
import threading
import time
from pathlib import Path

FLUSH_EVERY = 20_000

Value = int | str
_buffer: list[tuple[int, str, Value, Value]] | None = None
_path: Path | None = None
_lock = threading.Lock()
_keys = itertools.count(1)
_request: contextvars.ContextVar[int] = contextvars.ContextVar("localrun_trace_request", default=0)


def configure(directory: Path | None) -> None:
    """Start tracing this process into ``directory`` (None: leave it off)."""
    global _buffer, _path
    if directory is None or _buffer is not None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    _path = directory / f"trace-{os.getpid()}.jsonl"
    _buffer = []
    atexit.register(flush)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _flush_and_die)  # a runner stopped with its daemon's process group


def _flush_and_die(signum: int, _frame: object) -> None:
    flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def enabled() -> bool:
    return _buffer is not None


def mark(stage: str, key: Value = 0, value: Value = 0) -> None:
    """Record that ``stage`` happened now for ``key`` (thread-safe: list.append holds the GIL)."""
    buffer = _buffer
    if buffer is None:
        return
    buffer.append((time.monotonic_ns(), stage, key, value))
    if len(buffer) >= FLUSH_EVERY:
        flush()


def request_key() -> int:
    """The daemon-side key of the request this task serves (a new one on first use in the task)."""
    key = _request.get()
    if key == 0:
        key = next(_keys)
        _request.set(key)
    return key


def mark_request(stage: str, value: Value = 0) -> None:
    """:func:`mark` under the current request's key (daemon side)."""
    if _buffer is not None:
        mark(stage, request_key(), value)


def flush() -> None:
    """Append what is buffered to this process's trace file."""
    global _buffer
    if _buffer is None or _path is None:
        return
    with _lock:
        events, _buffer = _buffer, []
        with _path.open("a", encoding="utf-8") as f:
            for t, stage, key, value in events:
                f.write(json.dumps([t, stage, key, value]) + "\n")
