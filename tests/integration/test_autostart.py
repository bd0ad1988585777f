"""Login-service files (systemd, launchd, Windows) and installing them into temporary homes."""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path, PureWindowsPath

import pytest

from localrun.cli import autostart
from localrun.cli.autostart import (
    ServiceKind,
    ServiceManager,
    ServicePaths,
    ServiceSpec,
    render_launchd,
    render_systemd,
    render_windows,
)
from localrun.errors import LocalrunError

REPO = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, **env: str) -> ServiceSpec:
    return ServiceSpec(python=sys.executable, log_dir=tmp_path / "logs", working_dir=tmp_path, env=env)


def _unit_value(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


# --- systemd ---------------------------------------------------------------------------------------

def _systemd_verify(unit: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify`` as a user unit (a private runtime dir), else as a system unit."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    proc = subprocess.run(["systemd-analyze", "--user", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, env=env)
    if "Failed to initialize manager" in proc.stderr:
        proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    return proc


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("models", ["/srv/models", "/tmp/my models/100%"])
def test_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path, models: str) -> None:
    unit = tmp_path / "localrun.service"
    unit.write_text(render_systemd(_spec(tmp_path, LOCALRUN_MODELS=models, LOCALRUN_HOST="127.0.0.1:11500")))
    proc = _systemd_verify(unit, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # warnings ("Unknown key", "ignoring") fail too


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_verify_would_catch_a_missing_interpreter(tmp_path: Path) -> None:
    unit = tmp_path / "localrun.service"
    spec = ServiceSpec(python=str(tmp_path / "no-python"), log_dir=tmp_path, working_dir=tmp_path)
    unit.write_text(render_systemd(spec))
    assert _systemd_verify(unit, tmp_path).returncode != 0


def test_systemd_unit_runs_this_interpreter_and_logs_to_the_log_dir(tmp_path: Path) -> None:
    text = render_systemd(_spec(tmp_path, LOCALRUN_MODELS="/tmp/my models/100%", LOCALRUN_HOST=":11500"))
    (exec_start,) = _unit_value(text, "ExecStart")
    assert shlex.split(exec_start) == [sys.executable, "-m", "localrun", "serve"]
    assert _unit_value(text, "StandardOutput") == [f"append:{tmp_path / 'logs' / 'server.log'}"]
    envs = [shlex.split(v)[0].replace("%%", "%") for v in _unit_value(text, "Environment")]
    assert "LOCALRUN_MODELS=/tmp/my models/100%" in envs and "LOCALRUN_HOST=:11500" in envs
    assert _unit_value(text, "WantedBy") == ["default.target"]
    assert _unit_value(text, "Restart") == ["on-failure"]


def test_the_command_the_unit_runs_starts_localrun_serve(tmp_path: Path) -> None:
    (exec_start,) = _unit_value(render_systemd(_spec(tmp_path)), "ExecStart")
    proc = subprocess.run([*shlex.split(exec_start), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "usage: localrun serve" in proc.stdout


# --- launchd and Windows ---------------------------------------------------------------------------

def test_launchd_plist_round_trips_and_has_what_launchd_needs(tmp_path: Path) -> None:
    plist = plistlib.loads(render_launchd(_spec(tmp_path, LOCALRUN_HOST="127.0.0.1:11500")))
    assert plist["Label"] == autostart.LAUNCHD_LABEL
    assert plist["ProgramArguments"] == [sys.executable, "-m", "localrun", "serve"]
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["StandardOutPath"] == plist["StandardErrorPath"] == str(tmp_path / "logs" / "server.log")
    assert plist["EnvironmentVariables"]["LOCALRUN_HOST"] == "127.0.0.1:11500"


@pytest.mark.skipif(shutil.which("plutil") is None, reason="plutil only exists on macOS")
def test_launchd_plist_passes_plutil_lint(tmp_path: Path) -> None:  # pragma: no cover - macOS
    path = tmp_path / "agent.plist"
    path.write_bytes(render_launchd(_spec(tmp_path)))
    assert subprocess.run(["plutil", "-lint", str(path)], capture_output=True).returncode == 0


def test_windows_startup_script_starts_serve_with_logs_and_escapes_percent(tmp_path: Path) -> None:
    spec = ServiceSpec(python=r"C:\Program Files\Python312\pythonw.exe",
                       log_dir=PureWindowsPath(r"C:\Users\a\Logs"),  # type: ignore[arg-type]
                       working_dir=PureWindowsPath(r"C:\Users\a"),  # type: ignore[arg-type]
                       env={"LOCALRUN_MODELS": r"D:\models 100%"})
    text = render_windows(spec)
    assert text.count("\r\n") == len(text.splitlines())  # CRLF throughout: cmd.exe is happiest so
    assert '"C:\\Program Files\\Python312\\pythonw.exe" -m localrun serve' in text
    assert ">> \"C:\\Users\\a\\Logs\\server.log\" 2>&1" in text
    assert 'set "LOCALRUN_MODELS=D:\\models 100%%"' in text
    assert text.startswith("@echo off")


# --- installing into a temporary home ---------------------------------------------------------------

class FakeCommands:
    """Records commands; answers from ``codes`` (prefix match), 0 otherwise."""

    def __init__(self, codes: dict[str, int] | None = None) -> None:
        self.codes = codes or {}
        self.calls: list[str] = []

    def __call__(self, cmd: list[str]) -> tuple[int, str]:
        line = " ".join(cmd)
        self.calls.append(line)
        code = next((c for prefix, c in self.codes.items() if line.startswith(prefix)), 0)
        return code, "active" if "is-active" in line and code == 0 else ("boom" if code else "")


def _manager(tmp_path: Path, kind: ServiceKind, run: FakeCommands) -> ServiceManager:
    return ServiceManager(kind, ServicePaths.for_home(tmp_path / "home", env={}), run=run, uid=501)


def test_systemd_install_enables_and_starts_then_uninstall_removes(tmp_path: Path) -> None:
    run = FakeCommands()
    m = _manager(tmp_path, ServiceKind.SYSTEMD, run)
    result = m.install(_spec(tmp_path))
    assert result.path == tmp_path / "home" / ".config" / "systemd" / "user" / "localrun.service"
    assert result.path.is_file() and (tmp_path / "logs").is_dir()
    assert result.done == ("systemctl --user daemon-reload", "systemctl --user enable --now localrun.service")
    assert m.status().state == "active" and m.status().installed
    run.calls.clear()
    m.uninstall()
    assert not result.path.exists()
    assert "systemctl --user disable --now localrun.service" in run.calls
    assert not m.status().installed


def test_systemd_install_without_a_user_manager_says_what_to_run(tmp_path: Path) -> None:
    m = _manager(tmp_path, ServiceKind.SYSTEMD, FakeCommands({"systemctl --user show-environment": 1}))
    result = m.install(_spec(tmp_path))
    assert result.path.is_file() and result.done == ()
    assert result.todo == ("systemctl --user daemon-reload", "systemctl --user enable --now localrun.service")
    assert m.status().state is None


def test_a_failing_enable_is_reported_with_what_is_left(tmp_path: Path) -> None:
    m = _manager(tmp_path, ServiceKind.SYSTEMD, FakeCommands({"systemctl --user enable": 1}))
    result = m.install(_spec(tmp_path))
    assert result.error is not None and "boom" in result.error
    assert result.todo == ("systemctl --user enable --now localrun.service",)


def test_install_no_start_only_enables(tmp_path: Path) -> None:
    run = FakeCommands()
    _manager(tmp_path, ServiceKind.SYSTEMD, run).install(_spec(tmp_path), start=False)
    assert "systemctl --user enable localrun.service" in run.calls
    assert not any("--now" in c for c in run.calls)


def test_launchd_install_bootstraps_into_the_gui_domain(tmp_path: Path) -> None:
    run = FakeCommands({"launchctl print": 113})
    m = _manager(tmp_path, ServiceKind.LAUNCHD, run)
    result = m.install(_spec(tmp_path))
    assert result.path == tmp_path / "home" / "Library" / "LaunchAgents" / "io.localrun.serve.plist"
    assert plistlib.loads(result.path.read_bytes())["Label"] == "io.localrun.serve"
    assert f"launchctl bootstrap gui/501 {result.path}" in result.done
    assert m.status().state == "not loaded"
    m.uninstall()
    assert "launchctl bootout gui/501/io.localrun.serve" in run.calls and not result.path.exists()


def test_windows_install_writes_into_the_startup_folder(tmp_path: Path) -> None:
    paths = ServicePaths.for_home(tmp_path, env={"APPDATA": str(tmp_path / "Roaming")})
    m = ServiceManager(ServiceKind.WINDOWS, paths, run=FakeCommands())
    result = m.install(_spec(tmp_path), start=False)
    assert result.path == tmp_path / "Roaming" / "Microsoft" / "Windows" / "Start Menu" / "Programs" / \
        "Startup" / "localrun-serve.cmd"
    assert b"localrun serve" in result.path.read_bytes()


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_a_unit_holding_the_api_key_is_private(tmp_path: Path) -> None:
    m = _manager(tmp_path, ServiceKind.SYSTEMD, FakeCommands())
    path = m.install(_spec(tmp_path, LOCALRUN_API_KEY="s3cret")).path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path = m.install(_spec(tmp_path)).path
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_spec_keeps_only_localrun_settings_and_this_interpreter() -> None:
    spec = ServiceSpec.current({"LOCALRUN_HOST": ":1234", "LOCALRUN_MODELS": " ", "HOME": "/x", "PATH": "/bin"})
    assert dict(spec.env) == {"LOCALRUN_HOST": ":1234"}
    assert spec.argv[1:] == ["-m", "localrun", "serve"] and Path(spec.argv[0]).exists()


def test_paths_honour_xdg_config_home(tmp_path: Path) -> None:
    paths = ServicePaths.for_home(tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert paths.file_for(ServiceKind.SYSTEMD) == tmp_path / "cfg" / "systemd" / "user" / "localrun.service"


def test_unsupported_os_is_a_clear_error() -> None:
    with pytest.raises(LocalrunError, match="cannot install a login service on Plan9"):
        ServiceKind.for_system("Plan9")


# --- the templates in packaging/ stay what `localrun service` writes ----------------------------------

PLACEHOLDERS = ServiceSpec(python="@PYTHON@", log_dir=Path("@LOG_DIR@"), working_dir=Path("@HOME@"))


@pytest.mark.parametrize(("kind", "path"), [
    (ServiceKind.SYSTEMD, "packaging/systemd/localrun.service"),
    (ServiceKind.LAUNCHD, "packaging/launchd/io.localrun.serve.plist"),
    (ServiceKind.WINDOWS, "packaging/windows/localrun-serve.cmd"),
])
@pytest.mark.skipif(os.name == "nt", reason="the templates use POSIX separators after @LOG_DIR@")
def test_packaging_templates_match_what_install_writes(kind: ServiceKind, path: str) -> None:
    expected = autostart.render(kind, PLACEHOLDERS)
    assert (REPO / path).read_bytes() == expected, f"regenerate {path} (see packaging/README.md)"
