"""`localrun info`'s report with faked builds and machines: GPU detection and the reinstall advice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from localrun.cli.info_cmd import render
from localrun.errors import EngineError
from localrun.hardware import hostgpu, sysinfo
from localrun.hardware.devices import BuildInfo, NativeReport, cpu_device, fake_gpu
from localrun.hardware.hostgpu import HostGpu

CPU_INFO = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 0 | OPENMP = 1 | REPACK = 1 |"


def _build(backends: tuple[str, ...] = ("CPU",)) -> BuildInfo:
    return BuildInfo("0.3.36", "0.25.3", "0c1e570", "0.5.0", CPU_INFO, "CUDA" in backends, backends, "/lib")


def _report(backends: tuple[str, ...] = ("CPU",), gpus: int = 0) -> NativeReport:
    return NativeReport(_build(backends), tuple([cpu_device()] + [fake_gpu(80, name=f"CUDA{i}") for i in range(gpus)]))


NVIDIA = HostGpu("NVIDIA", "NVIDIA H100 80GB HBM3", "CUDA", "nvidia-smi", 80 * 1024**3)


def test_cpu_build_on_a_gpu_machine_prints_the_exact_reinstall_command() -> None:
    info = sysinfo.collect_info(native=lambda: _report(), host_gpus=lambda: [NVIDIA])
    assert info["build"]["backend"] == "CPU"
    (advice,) = info["advice"]
    expected = (f'CMAKE_ARGS="-DGGML_CUDA=on" {sys.executable} -m pip install --force-reinstall '
                "--no-cache-dir --no-deps llama-cpp-python==0.3.36")
    assert "NVIDIA H100 80GB HBM3" in advice and expected in advice
    assert expected in render(info)


def test_cuda_build_with_its_gpu_needs_no_advice() -> None:
    info = sysinfo.collect_info(native=lambda: _report(("CPU", "CUDA"), gpus=1), host_gpus=lambda: [NVIDIA])
    assert info["build"]["backend"] == "CUDA"
    assert info["advice"] == []
    assert [d["kind"] for d in info["devices"]] == ["cpu", "gpu"]
    assert "CUDA0: GPU   80.0 GiB free of 80.0 GiB" in render(info)


def test_cuda_build_that_finds_no_device_says_to_check_the_driver() -> None:
    info = sysinfo.collect_info(native=lambda: _report(("CPU", "CUDA")), host_gpus=lambda: [])
    (advice,) = info["advice"]
    assert "built with CUDA but no GPU device was found" in advice


def test_apple_silicon_gets_the_metal_command_and_rosetta_a_warning() -> None:
    gpu = HostGpu("Apple", "Apple Silicon GPU", "Metal", "apple-silicon (Python under Rosetta)")
    advice = hostgpu.rebuild_advice([gpu], (), 0, "0.3.36", python="python3")
    assert 'CMAKE_ARGS="-DGGML_METAL=on" python3 -m pip install' in advice[0]
    assert "Rosetta" in advice[1]


def test_windows_command_uses_powershell_syntax() -> None:
    cmd = hostgpu.reinstall_command("CUDA", "0.3.36", python=r"C:\Python 3\python.exe", windows=True)
    assert cmd == ('$env:CMAKE_ARGS="-DGGML_CUDA=on"; "C:\\Python 3\\python.exe" -m pip install '
                   "--force-reinstall --no-cache-dir --no-deps llama-cpp-python==0.3.36")


def test_a_broken_llama_cpp_is_reported_not_raised() -> None:
    def broken() -> NativeReport:
        raise EngineError("llama-cpp-python cannot be loaded: libllama.so: cannot open shared object file")

    info = sysinfo.collect_info(native=broken, host_gpus=lambda: [])
    assert info["devices"] == [] and info["build"]["backend"] is None
    assert "cannot open shared object file" in info["errors"][0]
    assert "problem: llama-cpp-python cannot be loaded" in render(info)


def test_models_dir_usage_counts_stored_files(isolated_env: Path) -> None:
    blobs = isolated_env / "models" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "sha256-aa").write_bytes(b"x" * 3000)
    (blobs / "sha256-bb").write_bytes(b"y" * 1000)
    info = sysinfo.collect_info(native=lambda: _report(), host_gpus=lambda: [])
    assert info["models"]["dir"] == str(isolated_env / "models")
    assert info["models"]["used_bytes"] == 4000
    assert info["models"]["disk_free_bytes"] > 0


def test_amx_workaround_says_whether_this_cpu_needs_it(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: Intel Xeon Platinum 8480+\nflags\t\t: fpu avx2 avx512f amx_tile amx_int8\n")
    info = sysinfo.collect_info(native=lambda: _report(), host_gpus=lambda: [], cpuinfo=cpuinfo,
                                repack_known=lambda: (False, "killed by signal 11"))
    (w,) = info["workarounds"]
    assert w["setting"] == "use_extra_bufts=False" and w["active"] and w["applies"]
    assert "SIGSEGV" in w["reason"] and "amx_tile" in w["reason"] and "killed by signal 11" in w["reason"]
    fine = sysinfo.collect_info(native=lambda: _report(), host_gpus=lambda: [], cpuinfo=cpuinfo,
                                repack_known=lambda: (True, ""))["workarounds"][0]
    assert not fine["active"] and "models load with repacked weights" in fine["reason"]
    assert info["cpu"]["model"] == "Intel Xeon Platinum 8480+"
    assert info["cpu"]["features"] == {"SSE3": True, "AVX2": True, "AVX512": False, "OPENMP": True,
                                       "REPACK": True}


def test_detect_reads_nvidia_smi_and_pci_vendors(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    for card, vendor in (("card0", "0x1a03"), ("card1", "0x10de"), ("card2", "0x8086"), ("card1-HDMI-A-1", "")):
        (sys_root / "class" / "drm" / card / "device").mkdir(parents=True)
        if vendor:
            (sys_root / "class" / "drm" / card / "device" / "vendor").write_text(vendor + "\n")

    def smi(cmd: list[str]) -> str | None:
        return "NVIDIA H100 80GB HBM3, 81559\n" if cmd[0] == "nvidia-smi" else None

    gpus = hostgpu.detect(run=smi, sys_root=sys_root, dev_root=tmp_path, system="Linux", machine="x86_64")
    assert [(g.vendor, g.backend, g.source) for g in gpus] == [
        ("NVIDIA", "CUDA", "nvidia-smi"), ("Intel", "Vulkan", "/sys/class/drm")]  # ASPEED BMC ignored
    assert gpus[0].total_bytes == 81559 * 1024 * 1024
    no_driver = hostgpu.detect(run=lambda c: None, sys_root=sys_root, dev_root=tmp_path, system="Linux")
    assert [g.vendor for g in no_driver] == ["NVIDIA", "Intel"]  # the card is there even without a driver
    # an Intel iGPU beside the NVIDIA card: build for the card only
    advice = hostgpu.rebuild_advice(no_driver, (), 0, "0.3.36", python="py")
    assert len(advice) == 1 and "-DGGML_CUDA=on" in advice[0]


@pytest.mark.parametrize(("machine", "expected"), [("arm64", ["Metal"]), ("x86_64", [])])
def test_detect_on_macos(machine: str, expected: list[str]) -> None:
    gpus = hostgpu.detect(run=lambda c: None, system="Darwin", machine=machine)
    assert [g.backend for g in gpus] == expected


def test_detect_on_a_plain_cpu_machine_finds_nothing(tmp_path: Path) -> None:
    assert hostgpu.detect(run=lambda c: None, sys_root=tmp_path, dev_root=tmp_path, system="Linux") == []
