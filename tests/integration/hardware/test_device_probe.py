"""The device probe's child process: a crash, noise around the marked line, an error the child reports."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from localrun.errors import EngineError
from localrun.hardware.devices import SubprocessProbe

# --- probe plumbing ---------------------------------------------------------------------------

def _fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake interpreter")
def test_subprocess_probe_reports_a_crashing_child_as_engine_error(tmp_path: Path) -> None:
    probe = SubprocessProbe(python=_fake_python(tmp_path, "echo 'Segmentation fault' >&2; exit 139"))
    with pytest.raises(EngineError, match="status 139: Segmentation fault"):
        probe.list_devices()


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake interpreter")
def test_subprocess_probe_reads_the_marked_line_among_noise(tmp_path: Path) -> None:
    payload = ('{"build": {"llama_cpp_python": "0.3.36", "ggml_version": null, "ggml_commit": null, '
               '"llama_version": null, "system_info": "CPU : AVX2 = 1 |", "supports_gpu_offload": true, '
               '"backends": ["CPU", "CUDA"], "lib_dir": "/x"}, "devices": ['
               '{"name": "CUDA0", "description": "H100", "kind": "gpu", "total_bytes": 85899345920, '
               '"free_bytes": 80000000000, "backend": "CUDA"}]}')
    body = f"echo 'ggml_cuda_init: found 1 CUDA devices'\necho 'LOCALRUN_DEVICES {payload}'"
    report = SubprocessProbe(python=_fake_python(tmp_path, body)).report()
    assert report.build.gpu_backends == ("CUDA",)
    assert report.devices[0].name == "CUDA0" and report.devices[0].is_gpu


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as a fake interpreter")
def test_subprocess_probe_passes_on_a_child_side_error(tmp_path: Path) -> None:
    body = "echo 'LOCALRUN_DEVICES {\"error\": \"llama-cpp-python cannot be loaded: no module\"}'"
    with pytest.raises(EngineError, match="cannot be loaded"):
        SubprocessProbe(python=_fake_python(tmp_path, body)).report()
