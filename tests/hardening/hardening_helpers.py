"""Helpers for the hardening tests: the OpenAPI file, the app's routes, a real daemon on loopback.

:class:`LiveDaemon` runs ``python -m localrun serve`` as a child process (a real daemon, not an
in-process test server) on a free 127.0.0.1 port, with its own model store and its log captured to
a file, and stops it (SIGTERM, then SIGKILL) at the end. Models are put in its store beforehand with
the real :class:`localrun.store.ModelStore` (the store is safe to share between processes).

When the real engine (``localrun.engine.engine``) is not importable yet, runners host the daemon
tests' fake engine (``tests/integration/server/fake_engine.py``); :func:`engine_kind` says which.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import serverguard
import yaml
from ports import free_port

REPO = Path(__file__).resolve().parents[2]
SPEC_PATH = REPO / "docs" / "openapi.yaml"
FAKE_ENGINE_DIR = REPO / "tests" / "integration" / "server"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def load_spec() -> dict[str, Any]:
    with open(SPEC_PATH, encoding="utf-8") as f:
        spec: dict[str, Any] = yaml.safe_load(f)
    return spec


def spec_operations(spec: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(METHOD, path) for every documented operation."""
    return {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def openapi_path(aiohttp_path: str) -> str:
    """``/v1/models/{model:.+}`` -> ``/v1/models/{model}`` (drop aiohttp's regex part)."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", aiohttp_path)


def app_operations(app: Any) -> set[tuple[str, str]]:
    """(METHOD, path) for every route of an aiohttp app, in OpenAPI path syntax."""
    out = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if path is None:
            continue
        out.add((route.method.upper(), openapi_path(path)))
    return out


def real_engine_available() -> bool:
    try:
        return importlib.util.find_spec("localrun.engine.engine") is not None
    except (ImportError, ValueError):
        return False


def engine_kind() -> str:
    return "llama.cpp" if real_engine_available() else "fake"


def runner_env() -> dict[str, str]:
    """Environment so runner processes host the real engine, or the fake one until it lands."""
    if real_engine_available():
        return {}
    return {
        "LOCALRUN_RUNNER_FACTORY": "fake_engine:FakeEngine",
        "PYTHONPATH": os.pathsep.join([str(FAKE_ENGINE_DIR), str(REPO), os.environ.get("PYTHONPATH", "")]),
    }



def add_model(models_dir: Path, name: str, gguf: Path, extra: str = "") -> None:
    """Create ``name`` from a local GGUF in the store at ``models_dir`` (the real store code)."""
    from localrun.store import ModelStore

    ModelStore(models_dir).create(name, f"FROM {gguf}\n{extra}", base_dir=gguf.parent)


@dataclass
class LiveDaemon:
    """A real ``localrun serve`` child process on 127.0.0.1 (see the module docstring)."""

    models_dir: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    log_level: str = "INFO"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> LiveDaemon:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCALRUN_")}
        env.update(runner_env())
        home = self.models_dir.parent / "daemon-home"
        for var in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            env[var] = str(home / var.lower())
        env["HF_HOME"] = str(home / "hf")
        env.pop("HF_TOKEN", None)
        env.update({
            "LOCALRUN_HOST": f"{self.host}:{self.port}",
            "LOCALRUN_MODELS": str(self.models_dir),
            "PYTHONUNBUFFERED": "1",
        })
        env.update(self.env)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the daemon; closed in stop()
        serverguard.watch_log(self.log_path)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localrun", "serve", "--log-level", self.log_level],
            cwd=str(self.models_dir.parent), env=env, stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0, headers=self.auth()).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"daemon did not answer within {timeout}s:\n{self.log_text()[-3000:]}")

    def auth(self) -> dict[str, str]:
        key = self.env.get("LOCALRUN_API_KEY")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def kill(self) -> None:
        """SIGKILL: what a crash or an OOM kill does (no cleanup at all)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> LiveDaemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def record_figures(test: str, **figures: Any) -> None:
    """Print one test's measured figures (for RELIABILITY.md) and append them to ``HARDENING_FIGURES``.

    Not a ``LOCALRUN_*`` variable: tests/conftest.py clears those for every test.
    """
    line = json.dumps({"test": test, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **figures})
    print(f"\nFIGURES {line}")
    target = os.environ.get("HARDENING_FIGURES")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def is_json_error(response: httpx.Response) -> bool:
    """A well-formed error: JSON, ``{"error": "msg"}`` on /api, an OpenAI error object on /v1."""
    try:
        body = response.json()
    except ValueError:
        return False
    if not isinstance(body, dict) or "error" not in body:
        return False
    error = body["error"]
    if response.request.url.path.startswith("/v1"):
        return isinstance(error, dict) and isinstance(error.get("message"), str) and bool(error["message"]) \
            and isinstance(error.get("type"), str)
    return isinstance(error, str) and bool(error)


def children_running(pid: int, module: str) -> list[int]:
    """The processes under ``pid`` that run ``python -m <module>``."""
    import psutil

    found = []
    try:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if module in child.cmdline():
                    found.append(child.pid)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
    except psutil.NoSuchProcess:
        pass
    return found


def runners_of(pid: int) -> list[int]:
    """The model runner processes under the daemon ``pid``.

    The daemon's template workers (``localrun.runtime.bounded_child``) are not runners: a small,
    bounded pool of them stays alive across requests on purpose (see :func:`template_workers_of`).
    """
    return children_running(pid, "localrun.runtime.runner")


def template_workers_of(pid: int) -> list[int]:
    """The daemon's template worker processes; each holds two pipe descriptors in the daemon."""
    return children_running(pid, "localrun.runtime.bounded_child")
