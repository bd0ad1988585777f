"""`localrun service install|status|uninstall` end to end in a temporary home, with a fake systemctl."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="exercises the systemd flavour")


def _env(home: Path, bin_dir: Path) -> dict[str, str]:
    env = os.environ.copy()
    env["HOME"] = str(home)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def _fake_systemctl(bin_dir: Path, user_manager: bool) -> Path:
    """A systemctl that logs its arguments and answers like a user manager (or like none)."""
    log = bin_dir / "systemctl.log"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "systemctl"
    state = 'case "$*" in *is-active*) echo active;; esac; exit 0' if user_manager else \
        'echo "Failed to connect to bus: No medium found" >&2; exit 1'
    script.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n{state}\n')
    script.chmod(0o755)
    return log


def _localrun(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "localrun", "service", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_install_status_uninstall_without_a_user_manager(isolated_env: Path, tmp_path: Path) -> None:
    env = _env(tmp_path / "home", tmp_path / "bin")
    _fake_systemctl(tmp_path / "bin", user_manager=False)
    unit = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user" / "localrun.service"

    proc = _localrun(env, "install")
    assert proc.returncode == 0, proc.stderr
    assert f"Wrote {unit}" in proc.stdout
    assert "systemctl --user enable --now localrun.service" in proc.stdout  # what to run by hand
    assert f"ExecStart={sys.executable} -m localrun serve" in unit.read_text()
    assert f"Environment=LOCALRUN_MODELS={env['LOCALRUN_MODELS']}" in unit.read_text()

    status = _localrun(env, "status")
    assert status.returncode == 0 and "(installed)" in status.stdout
    assert "daemon:    not answering" in status.stdout

    proc = _localrun(env, "uninstall")
    assert proc.returncode == 0 and not unit.exists()
    assert _localrun(env, "status").returncode == 3


def test_install_with_a_user_manager_enables_and_starts_it(isolated_env: Path, tmp_path: Path) -> None:
    env = _env(tmp_path / "home", tmp_path / "bin")
    log = _fake_systemctl(tmp_path / "bin", user_manager=True)
    proc = _localrun(env, "install")
    assert proc.returncode == 0, proc.stderr
    assert "Ran: systemctl --user enable --now localrun.service" in proc.stdout
    assert "--user daemon-reload" in log.read_text()
    assert "state:     active" in _localrun(env, "status").stdout
    _localrun(env, "uninstall")
    assert "--user disable --now localrun.service" in log.read_text()
