"""``localrun serve`` / ``ps`` / ``stop`` and ``ensure_daemon``: a real background daemon, the CLI in-process.

Runners host the fake engine (LOCALRUN_RUNNER_FACTORY) so these stay fast; the real engine is
exercised through the daemon in test_clients.py.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from daemonproc import listener_pid

from localrun import config
from localrun.cli.connect import ensure_daemon
from localrun.cli.daemon_logs import background_logs
from localrun.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_ensure_daemon_starts_one_in_the_background_and_ps_stop_use_it(
    store_with_tiny: None, capsys: pytest.CaptureFixture[str]
) -> None:
    client = ensure_daemon(timeout=60)
    assert client.is_running() and background_logs(config.host().port)[0].exists()
    pid = listener_pid(config.host().port)
    assert ensure_daemon().is_running() and listener_pid(config.host().port) == pid  # reuses it
    assert main(["ps"]) == 0
    header, table = capsys.readouterr().out.split("\n", 1)  # a line about the daemon, then Ollama's table
    assert header.startswith(f"localrun daemon at {config.host().url} (pid {pid},")
    assert table.split() == ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "POOL", "SLOTS", "THREADS", "UNTIL"]
    list(client.generate("tiny", "hello", keep_alive="10m"))
    assert main(["ps"]) == 0
    row = capsys.readouterr().out.splitlines()[2]
    assert row.startswith("tiny:latest") and "100% CPU" in row and "minutes from now" in row
    runner_pid = client.ps()[0]["pid"]
    assert main(["stop", "tiny"]) == 0
    assert client.ps() == []
    assert not psutil.pid_exists(runner_pid) or psutil.Process(runner_pid).status() == psutil.STATUS_ZOMBIE
    assert main(["stop", "tiny"]) == 1
    assert "not loaded" in capsys.readouterr().err


def test_stopping_the_daemon_ends_its_runners(store_with_tiny: None) -> None:
    client = ensure_daemon(timeout=60)
    list(client.generate("tiny", "hello"))
    runner_pid = client.ps()[0]["pid"]
    daemon_pid = listener_pid(config.host().port)
    assert daemon_pid is not None
    os.kill(daemon_pid, signal.SIGTERM)
    psutil.Process(daemon_pid).wait(30)
    for _ in range(100):
        if not psutil.pid_exists(runner_pid):
            break
        time.sleep(0.1)
    assert not psutil.pid_exists(runner_pid)
    assert "unloading tiny:latest: server shutting down" in background_logs(config.host().port)[0].read_text()


def test_cli_without_a_daemon_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ps"]) == 1
    assert "no localrun daemon answers" in capsys.readouterr().err


def test_store_commands_go_through_a_running_daemon(
    store_with_tiny: None, capsys: pytest.CaptureFixture[str], tiny_gguf: Path, tmp_path: Path
) -> None:
    client = ensure_daemon(timeout=60)
    assert main(["cp", "tiny", "twin"]) == 0
    list(client.generate("twin", "hello"))
    assert [m["name"] for m in client.ps()] == ["twin:latest"]
    assert main(["rm", "twin"]) == 0
    assert client.ps() == []  # removed through the daemon, which unloaded it first
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text("FROM ./model.gguf\nPARAMETER temperature 0.1\n")
    (tmp_path / "model.gguf").write_bytes(tiny_gguf.read_bytes())
    assert main(["create", "made", "-f", str(modelfile)]) == 0
    capsys.readouterr()
    assert main(["list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert sorted(names) == ["made:latest", "tiny:latest"]
    assert main(["rm", "nothing-here"]) == 1
