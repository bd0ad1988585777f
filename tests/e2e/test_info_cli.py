"""`localrun info` end to end: the real llama.cpp build probed in a child process, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")


def _localrun(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "localrun", *args], capture_output=True, text=True,
                          timeout=120, env=os.environ.copy())


def test_info_json_describes_the_installed_build(isolated_env: Path) -> None:
    proc = _localrun("info", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["errors"] == []
    assert info["llama_cpp"]["llama_cpp_python"] == metadata.version("llama-cpp-python")
    assert info["llama_cpp"]["ggml_version"]  # the library answered, not just the package metadata
    assert "CPU" in info["build"]["registered_backends"]
    kinds = [d["kind"] for d in info["devices"]]
    assert kinds[0] == "cpu" and all(d["total_bytes"] > 0 for d in info["devices"])
    if info["build"]["gpu_backends"]:
        assert info["build"]["supports_gpu_offload"]
    else:
        assert info["build"]["backend"] == "CPU" and "gpu" not in kinds
    assert info["cpu"]["features"], "llama_print_system_info was not parsed"
    assert info["models"]["dir"] == str(isolated_env / "models")
    assert info["workarounds"][0]["setting"] == "use_extra_bufts=False"


def test_info_text_report(isolated_env: Path) -> None:
    proc = _localrun("info")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"llama-cpp-python: {metadata.version('llama-cpp-python')}" in out
    assert "build backend:" in out and "devices" in out
    assert str(isolated_env / "models") in out
    assert "use_extra_bufts=False" in out
