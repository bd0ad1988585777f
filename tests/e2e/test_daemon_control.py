"""A daemon a user can see and stop, and honest start-up errors (issue #16), through the real CLI and daemon.

Runners host the fake engine (tests/e2e/conftest.py): it answers " w0 w1 w2 w3 w4", and a prompt
containing SLOW streams a token every 20 ms.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
import time
from typing import Any

import psutil
import pytest
from clirun import ENTRY, localrun
from daemonproc import listener_pid

from localrun import __version__, config
from localrun.client import Client
from localrun.errors import DaemonUnavailable, LocalrunError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _start(*extra: str) -> subprocess.CompletedProcess[str]:
    """Start the background daemon the way users do: a one-shot `run`, keeping the model loaded."""
    result = localrun("run", "--keepalive", "10m", "tiny", "hello", *extra)  # flags first: works before #16 too
    assert result.returncode == 0, result.stderr
    return result


def test_status_logs_and_ps_show_the_daemon(store_with_tiny: None) -> None:
    _start()
    pid = listener_pid(config.host().port)
    status = localrun("daemon", "status")
    assert status.returncode == 0, status.stderr
    out = status.stdout
    assert f"address: {config.host().url}" in _squeeze(out)
    assert f"pid: {pid}" in _squeeze(out) and f"version: {__version__}" in _squeeze(out)
    assert re.search(r"uptime:\s+\d+ seconds?", out)
    assert re.search(r"models:\s+tiny:latest", out)

    logs = localrun("daemon", "logs")
    assert logs.returncode == 0, logs.stderr
    assert f"listening on {config.host().url}" in logs.stdout
    assert f"pid {pid}" in logs.stdout
    assert "loaded tiny:latest" in logs.stdout or "loading tiny:latest" in logs.stdout

    ps = localrun("ps")
    header, columns = ps.stdout.splitlines()[:2]
    assert config.host().url in header and f"pid {pid}" in header
    assert columns.split() == ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "POOL", "SLOTS", "THREADS", "UNTIL"]


def _squeeze(text: str) -> str:
    return re.sub(r"[ \t]+", " ", text)


def test_stop_ends_the_daemon_and_its_runners(store_with_tiny: None) -> None:
    _start()
    daemon_pid = listener_pid(config.host().port)
    with Client() as client:
        runner_pid = client.ps()[0]["pid"]
    stopped = localrun("daemon", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped" in stopped.stdout and str(daemon_pid) in stopped.stdout
    assert listener_pid(config.host().port) is None
    assert not psutil.pid_exists(daemon_pid) or psutil.Process(daemon_pid).status() == psutil.STATUS_ZOMBIE
    assert not psutil.pid_exists(runner_pid) or psutil.Process(runner_pid).status() == psutil.STATUS_ZOMBIE

    again = localrun("daemon", "stop")
    assert again.returncode == 0 and "no localrun daemon" in again.stdout + again.stderr
    ps = localrun("ps")
    assert ps.returncode == 1 and "localrun serve" in ps.stderr


def _stream(prompt: str, num_predict: int, out: dict[str, Any], started: threading.Event) -> None:
    chunks = []
    try:
        with Client() as client:
            for chunk in client.generate("tiny", prompt, options={"num_predict": num_predict}):
                chunks.append(chunk)
                started.set()
    except LocalrunError as exc:
        out["error"] = exc
    finally:
        started.set()
        out["chunks"] = chunks


def test_stop_lets_requests_in_flight_finish_or_end_them_with_an_error(store_with_tiny: None) -> None:
    _start()
    short: dict[str, Any] = {}
    endless: dict[str, Any] = {}
    threads = []
    for result, n in ((short, 100), (endless, 100_000)):  # 2 s of tokens, and far more than the grace
        started = threading.Event()
        thread = threading.Thread(target=_stream, args=("SLOW story", n, result, started))
        thread.start()
        assert started.wait(60)
        threads.append(thread)
    stopped = localrun("daemon", "stop", "--grace", "6")
    for thread in threads:
        thread.join(60)
    assert stopped.returncode == 0, stopped.stderr
    assert "error" not in short and short["chunks"][-1]["done"] is True  # finished within the grace
    assert len(short["chunks"]) == 101
    error = endless.get("error")
    assert error is not None and not isinstance(error, DaemonUnavailable)  # an error chunk, not a cut stream
    assert len(endless["chunks"]) > 100


def test_logs_follow_ends_when_the_daemon_stops(store_with_tiny: None) -> None:
    _start()
    follower = subprocess.Popen([*ENTRY, "daemon", "logs", "-f"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    try:
        time.sleep(1.0)
        assert localrun("daemon", "stop").returncode == 0
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert "listening on" in out and "shutting down" in out


def test_a_failed_start_prints_only_this_attempts_cause(store_with_tiny: None) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", config.host().port))
    blocker.listen(1)  # holds the port and answers no HTTP
    try:
        first = localrun("run", "tiny", "hello", timeout=90)
        second = localrun("run", "tiny", "hello", timeout=90)
    finally:
        blocker.close()
    for result in (first, second):
        assert result.returncode == 1
        assert result.stderr.count("address already in use") == 1, result.stderr
        assert "could not start the localrun daemon" in result.stderr
        # Whole lines only: every line of the excerpt is a log line or our own message.
        assert all(line.startswith(("Error:", "  ", "(")) or not line for line in result.stderr.splitlines()[1:])


def test_bad_settings_are_refused_even_with_a_daemon_running(store_with_tiny: None) -> None:
    _start()
    bad = localrun("run", "tiny", "hello", env={"LOCALRUN_KEEP_ALIVE": "abc"})
    assert bad.returncode == 2 and bad.stdout == ""
    assert "LOCALRUN_KEEP_ALIVE='abc'" in bad.stderr
    typo = localrun("ps", env={"LOCALRUN_KEEPALIVE": "10m"})
    assert typo.returncode == 0
    assert "LOCALRUN_KEEPALIVE is not a localrun setting" in typo.stderr and "LOCALRUN_KEEP_ALIVE" in typo.stderr


def test_settings_that_differ_from_the_running_daemons_are_named(store_with_tiny: None) -> None:
    _start()
    differs = localrun("run", "tiny", "hello", env={"LOCALRUN_KEEP_ALIVE": "10m", "LOCALRUN_MAX_QUEUE": "7"})
    assert differs.returncode == 0 and differs.stdout.strip() == "w0 w1 w2 w3 w4"
    warning = _squeeze(differs.stderr)
    assert "LOCALRUN_KEEP_ALIVE=10m" in warning and "5m" in warning
    assert "LOCALRUN_MAX_QUEUE=7" in warning and "512" in warning
    assert "localrun daemon stop" in warning
    same = localrun("run", "tiny", "hello", env={"LOCALRUN_KEEP_ALIVE": "300"})  # 300 s is the daemon's 5m
    assert same.returncode == 0 and "LOCALRUN_KEEP_ALIVE" not in same.stderr
    status = localrun("daemon", "status", env={"LOCALRUN_KEEP_ALIVE": "10m"})
    assert "LOCALRUN_KEEP_ALIVE" in status.stdout + status.stderr


def test_sigterm_still_stops_it_gracefully(store_with_tiny: None) -> None:
    _start()
    daemon_pid = listener_pid(config.host().port)
    assert daemon_pid is not None
    psutil.Process(daemon_pid).send_signal(signal.SIGTERM)
    psutil.Process(daemon_pid).wait(60)
    logs = localrun("daemon", "logs")  # no daemon: the newest background log is shown
    assert "shutting down" in logs.stdout
