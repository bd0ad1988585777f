"""Find and stop the background daemon a test started (it listens on the test's LOCALRUN_HOST)."""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

from localrun import config


def listener_pid(port: int) -> int | None:
    """The pid of the process listening on 127.0.0.1:``port``, or None."""
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            return int(conn.pid)
    return None


def stop_daemon() -> None:
    """SIGTERM the daemon on this test's port, if any, and wait up to 30 s for it to exit."""
    pid = listener_pid(config.host().port)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(30)
