"""packaging/: the build recipes print the flags localrun's advice uses; the Windows task is valid XML."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from localrun.hardware.hostgpu import CMAKE_FLAGS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "packaging" / "build-llama-cpp.sh"
needs_bash = pytest.mark.skipif(shutil.which("bash") is None or sys.platform == "win32", reason="needs bash")


def _dry_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args, "--dry-run", "--python", sys.executable],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env=env)


@needs_bash
def test_build_script_is_valid_bash() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


@needs_bash
@pytest.mark.parametrize(("backend", "flag"), [("cuda", "CUDA"), ("metal", "Metal"), ("vulkan", "Vulkan"),
                                                ("rocm", "ROCm")])
def test_gpu_recipes_use_the_flags_localrun_info_advises(backend: str, flag: str) -> None:
    proc = _dry_run(backend, "--version", "0.3.36")
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith(f'CMAKE_ARGS="{CMAKE_FLAGS[flag]}')
    assert f"{sys.executable} -m pip install --force-reinstall --no-cache-dir --no-deps" in line
    assert line.endswith("llama-cpp-python==0.3.36")


@needs_bash
def test_cpu_recipes_and_installed_version_default() -> None:
    from importlib import metadata

    native = _dry_run("cpu").stdout
    assert "-DGGML_NATIVE=on" in native and f"llama-cpp-python=={metadata.version('llama-cpp-python')}" in native
    assert "-DGGML_CPU_ALL_VARIANTS=on" in _dry_run("cpu-portable").stdout


@needs_bash
def test_cuda_architectures_can_be_pinned() -> None:
    proc = _dry_run("cuda", env={**os.environ, "CUDA_ARCHS": "90"})
    assert "-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" in proc.stdout


@needs_bash
def test_unknown_backend_is_refused_with_usage() -> None:
    proc = _dry_run("opengl")
    assert proc.returncode == 2
    assert "unknown backend: opengl" in proc.stderr and "BACKEND:" in proc.stderr


def test_task_scheduler_xml_runs_serve_at_logon() -> None:
    ns = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}
    root = ET.parse(REPO / "packaging" / "windows" / "localrun-task.xml").getroot()
    assert root.find("t:Triggers/t:LogonTrigger", ns) is not None
    exec_ = root.find("t:Actions/t:Exec", ns)
    assert exec_ is not None
    args = exec_.findtext("t:Arguments", namespaces=ns) or ""
    assert '"@PYTHONW@" -m localrun serve >> "@LOG_DIR@\\server.log" 2>&1' in args
    assert root.findtext("t:Settings/t:ExecutionTimeLimit", namespaces=ns) == "PT0S"  # never killed
