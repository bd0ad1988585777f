"""Run ``localrun serve`` at login: a systemd user unit, a launchd agent, or a Windows Startup script.

:func:`render` writes the file's text for a :class:`ServiceSpec` (what to run, its environment, the
log file); :class:`ServiceManager` installs, removes and inspects it. Every path is injectable
(:meth:`ServicePaths.for_home`) and every command goes through ``run`` so tests use temporary
directories and fake ``systemctl``/``launchctl``.

- systemd: ``~/.config/systemd/user/localrun.service`` (``$XDG_CONFIG_HOME`` honoured), then
  ``systemctl --user daemon-reload`` and ``enable --now`` when a user manager answers; otherwise the
  file is written and the commands to run are returned in ``InstallResult.todo``.
- launchd: ``~/Library/LaunchAgents/io.localrun.serve.plist``, then ``launchctl bootstrap gui/UID``.
- Windows: ``localrun-serve.cmd`` in the Startup folder, run at every login.

The daemon's output goes to ``server.log`` in the platformdirs user log dir (the same file
``localrun serve`` started by the CLI writes). ``LOCALRUN_*`` variables set at install time are
written into the unit, so the service serves the same store on the same address; when one of them
is ``LOCALRUN_API_KEY`` the file is made readable by its owner only.
"""

from __future__ import annotations

import enum
import os
import platform
import plistlib
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import config
from ..errors import LocalrunError

UNIT_NAME = "localrun.service"
LAUNCHD_LABEL = "io.localrun.serve"
WINDOWS_SCRIPT = "localrun-serve.cmd"
LOG_NAME = "server.log"
SECRET_VARS = ("LOCALRUN_API_KEY",)


class ServiceKind(enum.StrEnum):
    SYSTEMD = "systemd"
    LAUNCHD = "launchd"
    WINDOWS = "windows"

    @classmethod
    def for_system(cls, system: str | None = None) -> ServiceKind:
        """The kind this OS uses; raises LocalrunError for one localrun cannot install a service on."""
        system = system or platform.system()
        kinds = {"Linux": cls.SYSTEMD, "Darwin": cls.LAUNCHD, "Windows": cls.WINDOWS}
        if system not in kinds:
            raise LocalrunError(f"localrun cannot install a login service on {system}; run `localrun serve`")
        return kinds[system]


@dataclass(frozen=True, slots=True)
class ServicePaths:
    """Where each kind of service file goes."""

    systemd_dir: Path
    launch_agents_dir: Path
    startup_dir: Path

    @classmethod
    def for_home(cls, home: Path | None = None, env: Mapping[str, str] | None = None) -> ServicePaths:
        home = home or Path.home()
        env = os.environ if env is None else env
        xdg = env.get("XDG_CONFIG_HOME")
        appdata = Path(env["APPDATA"]) if env.get("APPDATA") else home / "AppData" / "Roaming"
        return cls(
            systemd_dir=(Path(xdg) if xdg else home / ".config") / "systemd" / "user",
            launch_agents_dir=home / "Library" / "LaunchAgents",
            startup_dir=appdata / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "Startup",
        )

    def file_for(self, kind: ServiceKind) -> Path:
        if kind is ServiceKind.SYSTEMD:
            return self.systemd_dir / UNIT_NAME
        if kind is ServiceKind.LAUNCHD:
            return self.launch_agents_dir / f"{LAUNCHD_LABEL}.plist"
        return self.startup_dir / WINDOWS_SCRIPT


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """What the service runs: ``python -m localrun serve`` with ``env``, logging to ``log_dir``."""

    python: str
    log_dir: Path
    working_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def argv(self) -> list[str]:
        return [self.python, "-m", "localrun", "serve"]

    @property
    def log_file(self) -> Path:
        return self.log_dir / LOG_NAME

    @property
    def has_secrets(self) -> bool:
        return any(k in SECRET_VARS for k in self.env)

    @classmethod
    def current(cls, environ: Mapping[str, str] | None = None) -> ServiceSpec:
        """This interpreter, the platformdirs log dir and the ``LOCALRUN_*`` variables set now."""
        environ = os.environ if environ is None else environ
        env = {k: v for k, v in sorted(environ.items()) if k.startswith("LOCALRUN_") and v.strip()}
        python = sys.executable
        if os.name == "nt" and python.lower().endswith("python.exe"):
            windowless = python[: -len("python.exe")] + "pythonw.exe"
            python = windowless if Path(windowless).exists() else python
        return cls(python=python, log_dir=config.log_dir(), working_dir=Path.home(), env=env)


# --- rendering ----------------------------------------------------------------------------------

def _systemd_quote(arg: str) -> str:
    """One ExecStart word: ``%`` doubled (systemd specifiers), quoted when it has spaces or quotes."""
    arg = arg.replace("%", "%%")
    if any(c in arg for c in ' \t"\'\\;$'):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def render_systemd(spec: ServiceSpec) -> str:
    env_lines = "".join(f"Environment={_systemd_quote(f'{k}={v}')}\n" for k, v in spec.env.items())
    log = str(spec.log_file).replace("%", "%%")
    return (
        "# localrun: run the model server at login. Written by `localrun service install`;\n"
        "# remove with `localrun service uninstall`.\n"
        "[Unit]\n"
        "Description=localrun model server (Ollama- and OpenAI-compatible APIs)\n"
        "\n"
        "[Service]\n"
        "Type=exec\n"
        f"ExecStart={' '.join(_systemd_quote(a) for a in spec.argv)}\n"
        f"WorkingDirectory={_systemd_quote(str(spec.working_dir))}\n"
        f"{env_lines}"
        "Environment=PYTHONUNBUFFERED=1\n"
        f"StandardOutput=append:{log}\n"
        f"StandardError=append:{log}\n"
        "Restart=on-failure\n"
        "RestartSec=5\n"
        "# Runner processes are children of the daemon: stop them all, give models time to unload.\n"
        "TimeoutStopSec=30\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def render_launchd(spec: ServiceSpec) -> bytes:
    plist = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": spec.argv,
        "WorkingDirectory": str(spec.working_dir),
        "EnvironmentVariables": {**spec.env, "PYTHONUNBUFFERED": "1"},
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},  # restart after a crash, not after a clean stop
        "ProcessType": "Interactive",  # "Background" would throttle CPU and I/O: inference is the job
        "StandardOutPath": str(spec.log_file),
        "StandardErrorPath": str(spec.log_file),
    }
    return plistlib.dumps(plist)


def _cmd_quote(arg: str) -> str:
    return '"' + arg.replace('"', '""').replace("%", "%%") + '"'


def render_windows(spec: ServiceSpec) -> str:
    sets = "".join(f'set "{k}={v.replace("%", "%%")}"\r\n' for k, v in spec.env.items())
    argv = " ".join(_cmd_quote(a) if i == 0 or " " in a else a for i, a in enumerate(spec.argv))
    log_dir, log = _cmd_quote(str(spec.log_dir)), _cmd_quote(str(spec.log_file))
    return (
        "@echo off\r\n"
        "rem localrun: run the model server at login. Written by `localrun service install`;\r\n"
        "rem remove with `localrun service uninstall`.\r\n"
        "setlocal\r\n"
        f"{sets}"
        "set PYTHONUNBUFFERED=1\r\n"
        f"if not exist {log_dir} mkdir {log_dir}\r\n"
        f"cd /d {_cmd_quote(str(spec.working_dir))}\r\n"
        "rem /b: no new console; pythonw.exe has no window, and keeps the redirected log handles.\r\n"
        f'start "localrun" /b {argv} >> {log} 2>&1\r\n'
    )


def render(kind: ServiceKind, spec: ServiceSpec) -> bytes:
    """The service file's bytes for ``kind``."""
    if kind is ServiceKind.SYSTEMD:
        return render_systemd(spec).encode()
    if kind is ServiceKind.LAUNCHD:
        return render_launchd(spec)
    return render_windows(spec).encode()


# --- installing ---------------------------------------------------------------------------------

Run = Callable[[list[str]], "tuple[int, str]"]


def run_command(cmd: list[str]) -> tuple[int, str]:
    """Exit status and combined output of ``cmd``; 127 when it cannot be started, 124 on timeout."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not found"
    except OSError as exc:
        return 126, str(exc)
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(cmd)}: no answer within 30 s"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


@dataclass(frozen=True, slots=True)
class InstallResult:
    """``done``: commands that ran; ``todo``: what the user still has to run; ``error``: why."""

    path: Path
    done: tuple[str, ...] = ()
    todo: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    kind: ServiceKind
    path: Path
    installed: bool
    state: str | None  # the service manager's word ("active", "inactive", "loaded"...), None = unknown


class ServiceManager:
    """Installs, removes and inspects the login service of one ``kind``."""

    def __init__(self, kind: ServiceKind | None = None, paths: ServicePaths | None = None,
                 run: Run = run_command, uid: int | None = None) -> None:
        self.kind = kind or ServiceKind.for_system()
        self.paths = paths or ServicePaths.for_home()
        self.run = run
        self.uid = uid if uid is not None else (os.getuid() if hasattr(os, "getuid") else 0)

    @property
    def path(self) -> Path:
        return self.paths.file_for(self.kind)

    def _systemctl_usable(self) -> bool:
        return self.run(["systemctl", "--user", "show-environment"])[0] == 0

    def _steps(self, cmds: list[list[str]]) -> InstallResult:
        """Run ``cmds`` in order; from the first failure on, they become things to do by hand."""
        done: list[str] = []
        for i, cmd in enumerate(cmds):
            code, out = self.run(cmd)
            if code != 0:
                error = f"`{' '.join(cmd)}` failed ({code}): {out or 'no output'}"
                return InstallResult(self.path, tuple(done), tuple(" ".join(c) for c in cmds[i:]), error)
            done.append(" ".join(cmd))
        return InstallResult(self.path, tuple(done))

    def install(self, spec: ServiceSpec, start: bool = True) -> InstallResult:
        """Write the service file (replacing an older one) and, with ``start``, start it now."""
        spec.log_dir.mkdir(parents=True, exist_ok=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        # Created private, so an API key in it is never readable by others, even for a moment.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(render(self.kind, spec))
        tmp.chmod(0o600 if spec.has_secrets else 0o644)
        os.replace(tmp, self.path)
        cmds = self._start_commands() if start else self._register_commands()
        if not cmds:
            return InstallResult(self.path)
        if self.kind is ServiceKind.SYSTEMD and not self._systemctl_usable():
            return InstallResult(self.path, todo=tuple(" ".join(c) for c in cmds))
        return self._steps(cmds)

    def _register_commands(self) -> list[list[str]]:
        if self.kind is ServiceKind.SYSTEMD:
            return [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", UNIT_NAME]]
        return []  # launchd and the Startup folder pick the file up at the next login

    def _start_commands(self) -> list[list[str]]:
        if self.kind is ServiceKind.SYSTEMD:
            return [["systemctl", "--user", "daemon-reload"],
                    ["systemctl", "--user", "enable", "--now", UNIT_NAME]]
        if self.kind is ServiceKind.LAUNCHD:
            domain = f"gui/{self.uid}"
            # bootstrap fails when an older copy is loaded: bootout first, ignoring "not loaded".
            self.run(["launchctl", "bootout", f"{domain}/{LAUNCHD_LABEL}"])
            return [["launchctl", "bootstrap", domain, str(self.path)]]
        return [["cmd", "/c", "start", "", "/min", str(self.path)]]

    def uninstall(self) -> InstallResult:
        """Stop the service and remove its file; harmless when it is not installed."""
        done: list[str] = []
        if self.kind is ServiceKind.SYSTEMD and self._systemctl_usable():
            cmd = ["systemctl", "--user", "disable", "--now", UNIT_NAME]
            if self.path.exists() and self.run(cmd)[0] == 0:
                done.append(" ".join(cmd))
        elif self.kind is ServiceKind.LAUNCHD:
            cmd = ["launchctl", "bootout", f"gui/{self.uid}/{LAUNCHD_LABEL}"]
            if self.path.exists() and self.run(cmd)[0] == 0:
                done.append(" ".join(cmd))
        existed = self.path.exists()
        self.path.unlink(missing_ok=True)
        todo: tuple[str, ...] = ()
        if self.kind is ServiceKind.SYSTEMD:
            if self._systemctl_usable():
                self.run(["systemctl", "--user", "daemon-reload"])
            elif existed:
                todo = ("systemctl --user daemon-reload",)
        return InstallResult(self.path, tuple(done), todo)

    def status(self) -> ServiceStatus:
        installed = self.path.exists()
        state: str | None = None
        if self.kind is ServiceKind.SYSTEMD and self._systemctl_usable():
            code, out = self.run(["systemctl", "--user", "is-active", UNIT_NAME])
            state = out.splitlines()[0] if out else ("active" if code == 0 else None)
        elif self.kind is ServiceKind.LAUNCHD:
            code, _ = self.run(["launchctl", "print", f"gui/{self.uid}/{LAUNCHD_LABEL}"])
            state = "loaded" if code == 0 else "not loaded"
        return ServiceStatus(self.kind, self.path, installed, state)
