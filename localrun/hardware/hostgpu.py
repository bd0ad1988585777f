"""GPUs the machine has, whatever llama.cpp was built with, and how to rebuild llama.cpp for them.

Detection is cheap and never loads a GPU driver into this process: ``nvidia-smi`` (any OS),
``/sys/class/drm/card*/device/vendor`` PCI vendor ids (Linux), ``/dev/kfd`` and ``rocm-smi`` (ROCm),
and the CPU architecture on macOS (Apple Silicon has a Metal GPU; Python running under Rosetta is
detected because a Rosetta process cannot use Metal through an x86_64 build).

:func:`rebuild_advice` turns "a GPU is here but the build cannot use it" into the exact command that
reinstalls the same llama-cpp-python version with the right backend.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..jsontypes import JSONObject

log = logging.getLogger(__name__)

# PCI vendor id -> (vendor, llama.cpp backend that drives it best)
_PCI_VENDORS = {"0x10de": ("NVIDIA", "CUDA"), "0x1002": ("AMD", "ROCm"), "0x8086": ("Intel", "Vulkan")}
CMAKE_FLAGS = {
    "CUDA": "-DGGML_CUDA=on",
    "Metal": "-DGGML_METAL=on",
    "ROCm": "-DGGML_HIP=on",
    "Vulkan": "-DGGML_VULKAN=on",
}


@dataclass(frozen=True, slots=True)
class HostGpu:
    """A GPU seen on the machine: ``backend`` is the llama.cpp backend to build for it."""

    vendor: str
    name: str
    backend: str
    source: str                 # how it was found: "nvidia-smi", "/sys/class/drm", "apple-silicon"...
    total_bytes: int | None = None

    def to_dict(self) -> JSONObject:
        return asdict(self)


Runner = Callable[[list[str]], str | None]


def _run(cmd: list[str]) -> str | None:
    """stdout of a short command, or None when it is missing, fails or hangs."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _nvidia(run: Runner) -> list[HostGpu]:
    out = run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"])
    gpus = []
    for line in (out or "").splitlines():
        name, _, mib = line.rpartition(",")
        if name.strip():
            total = int(float(mib)) * 1024 * 1024 if mib.strip().replace(".", "").isdigit() else None
            gpus.append(HostGpu("NVIDIA", name.strip(), "CUDA", "nvidia-smi", total))
    return gpus


def _linux_pci(sys_root: Path) -> list[HostGpu]:
    gpus = []
    for card in sorted(sys_root.glob("class/drm/card[0-9]*")):
        if "-" in card.name:  # connectors such as card0-HDMI-A-1
            continue
        try:
            vendor_id = (card / "device" / "vendor").read_text().strip().lower()
        except OSError:
            continue
        if vendor_id in _PCI_VENDORS:
            vendor, backend = _PCI_VENDORS[vendor_id]
            gpus.append(HostGpu(vendor, f"{vendor} GPU ({card.name})", backend, "/sys/class/drm"))
    return gpus


def detect(run: Runner = _run, sys_root: Path = Path("/sys"), dev_root: Path = Path("/dev"),
           system: str | None = None, machine: str | None = None) -> list[HostGpu]:
    """GPUs present on this machine (empty when none is found). Seams are for tests."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    gpus = _nvidia(run)
    if system == "Darwin":
        translated = (run(["sysctl", "-n", "sysctl.proc_translated"]) or "").strip() == "1"
        if machine in ("arm64", "aarch64") or translated:
            source = "apple-silicon (Python under Rosetta)" if translated else "apple-silicon"
            gpus.append(HostGpu("Apple", "Apple Silicon GPU", "Metal", source))
        return gpus
    if system != "Linux":
        return gpus
    pci = _linux_pci(sys_root)
    if not gpus and (dev_root / "nvidia0").exists():
        gpus.append(HostGpu("NVIDIA", "NVIDIA GPU (/dev/nvidia0)", "CUDA", "/dev/nvidia0"))
    gpus += [g for g in pci if g.vendor != "NVIDIA" or not gpus]
    if (dev_root / "kfd").exists() and not any(g.vendor == "AMD" for g in gpus):
        gpus.append(HostGpu("AMD", "AMD GPU (/dev/kfd)", "ROCm", "/dev/kfd"))
    return gpus


def reinstall_command(backend: str, version: str, python: str | None = None, windows: bool | None = None) -> str:
    """The command that rebuilds the installed llama-cpp-python ``version`` for ``backend``.

    ``--no-deps`` keeps numpy and friends as they are; ``--no-cache-dir`` stops pip reusing the
    CPU wheel it built before.
    """
    python = python or sys.executable
    windows = (os.name == "nt") if windows is None else windows
    flag = CMAKE_FLAGS[backend]
    pip = f'"{python}" -m pip' if " " in python else f"{python} -m pip"
    tail = f"install --force-reinstall --no-cache-dir --no-deps llama-cpp-python=={version}"
    if windows:
        return f'$env:CMAKE_ARGS="{flag}"; {pip} {tail}'
    return f'CMAKE_ARGS="{flag}" {pip} {tail}'


def rebuild_advice(host_gpus: list[HostGpu], gpu_backends: tuple[str, ...], gpu_devices: int,
                   version: str, python: str | None = None) -> list[str]:
    """What to tell the user when GPUs and the build do not match (empty when they do)."""
    advice: list[str] = []
    wanted: list[str] = []
    for g in host_gpus:
        if g.backend not in wanted:
            wanted.append(g.backend)
    if host_gpus and not gpu_backends:
        names = ", ".join(sorted({g.name for g in host_gpus}))
        for backend in wanted:
            if backend == "Vulkan" and len(wanted) > 1:
                continue  # an Intel iGPU beside an NVIDIA/AMD card: build for the card
            extra = ""
            if backend == "ROCm":
                extra = " (set HIPCXX and AMDGPU_TARGETS as in packaging/README.md; -DGGML_VULKAN=on also works)"
            elif backend == "Vulkan":
                extra = " (needs the Vulkan SDK; an integrated GPU may be no faster than the CPU)"
            advice.append(
                f"This machine has a GPU ({names}) but llama-cpp-python was built for CPU only, so models "
                f"run on the CPU. To use the GPU, rebuild it with {backend}{extra}:\n"
                f"  {reinstall_command(backend, version, python)}")
        if any("Rosetta" in g.source for g in host_gpus):
            advice.append("Python runs under Rosetta (x86_64) on Apple Silicon: install an arm64 Python "
                          "first, or the Metal build cannot be used.")
    elif gpu_backends and gpu_devices == 0:
        advice.append(
            f"llama-cpp-python was built with {'/'.join(gpu_backends)} but no GPU device was found: "
            "check the driver (e.g. `nvidia-smi`) and that the runtime libraries are on the library "
            "path; models run on the CPU meanwhile.")
    return advice
