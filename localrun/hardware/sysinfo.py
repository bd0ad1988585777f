"""What ``localrun info`` and ``GET /api/info`` report: versions, build, devices, CPU, workarounds, store.

:func:`collect_info` returns a plain JSON-ready dict, typed as :class:`Info` (the daemon serves it as is;
the CLI prints it).
It never raises for a missing or broken llama.cpp: problems go into ``errors`` and the rest is still
reported. It takes about 0.3 s on a CPU-only machine (a child process probes the devices, see
:mod:`localrun.hardware.devices`), longer the first time a GPU driver initialises; callers in the daemon should
run it in a thread.

Keys: ``localrun`` (version, python, platform), ``llama_cpp`` (versions, commit, system_info, library
dir), ``build`` (``backend``: "CPU", "CUDA", "Metal"..., registered backends, GPU offload support),
``devices`` (list of Device dicts), ``host_gpus`` (GPUs on the machine whatever the build),
``cpu`` (model, cores, ``features`` from llama.cpp, ``flags`` from the OS), ``memory``,
``workarounds`` (list of {name, setting, active, applies, reason}), ``models`` (dir, bytes used, disk
free), ``settings``, ``advice`` (strings, e.g. the reinstall command), ``errors`` (strings).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from .. import __version__, config
from ..errors import LocalrunError
from ..jsontypes import JSONObject, JSONValue
from . import hostgpu, repack
from .cpuinfo import cpu_flags
from .devices import NativeReport, probe_native, with_current_ram

AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")
NO_EXTRA_BUFTS_REASON = (
    "llama.cpp repacks CPU weights into the layouts its fastest kernels read (use_extra_bufts, what "
    "--no-repack turns off), as llama-server and Ollama do by default. A CPU that advertises AMX inside a "
    "VM that does not let processes use it crashes with SIGSEGV in ggml_backend_amx_mul_mat, so a child "
    "process tries it once per CPU model and models load without repacking where it crashed."
)


class LocalrunVersion(TypedDict):
    version: str
    python: str
    executable: str
    platform: str


class LlamaCppVersion(TypedDict):
    """The installed llama-cpp-python and the llama.cpp it wraps (None where the probe failed)."""

    llama_cpp_python: str | None
    ggml_version: str | None
    ggml_commit: str | None
    llama_version: str | None
    system_info: str | None
    lib_dir: str | None


class BuildReport(TypedDict):
    backend: str | None             # "CPU", "CUDA", "CUDA+Vulkan"...; None where the probe failed
    gpu_backends: list[str]
    registered_backends: list[str]
    supports_gpu_offload: bool
    supports_rpc: bool


class CpuReport(TypedDict):
    model: str | None
    cores_physical: int | None
    cores_logical: int | None
    arch: str
    features: dict[str, bool]       # llama.cpp's system_info
    flags: list[str]                # the OS's, those worth showing


class MemoryReport(TypedDict):
    total_bytes: int
    available_bytes: int


class Workaround(TypedDict):
    name: str
    setting: str
    active: bool
    applies: bool
    reason: str


class DirUsage(TypedDict, total=False):
    """:func:`dir_usage`'s result; in :class:`Info` it is empty when the models directory setting is unusable."""

    dir: str
    exists: bool
    used_bytes: int
    disk_free_bytes: int | None
    disk_total_bytes: int | None


class Info(TypedDict):
    """What :func:`collect_info` returns (the keys of the module docstring)."""

    localrun: LocalrunVersion
    llama_cpp: LlamaCppVersion
    build: BuildReport
    devices: list[JSONObject]       # Device.to_dict
    host_gpus: list[JSONObject]     # HostGpu.to_dict
    cpu: CpuReport
    memory: MemoryReport
    workarounds: list[Workaround]
    models: DirUsage
    settings: JSONObject            # the LOCALRUN_* settings that could be read
    advice: list[str]
    errors: list[str]


def parse_system_info(text: str) -> dict[str, bool]:
    """``llama_print_system_info()`` (``CPU : AVX2 = 1 | ...``) as {"AVX2": True, ...}."""
    return {k: v != "0" for k, v in re.findall(r"([A-Z][A-Z0-9_]*) = (\d+)", text)}


def dir_usage(path: Path) -> DirUsage:
    """Bytes of regular files under ``path`` (symlinks not followed) and the free space of its disk."""
    used = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        used += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    free: int | None = None
    total: int | None = None
    try:
        disk = shutil.disk_usage(probe)
        free, total = disk.free, disk.total
    except OSError:
        pass
    return {"dir": str(path), "exists": path.is_dir(), "used_bytes": used,
            "disk_free_bytes": free, "disk_total_bytes": total}


def _settings(errors: list[str]) -> JSONObject:
    out: JSONObject = {}
    getters: tuple[tuple[str, Callable[[], JSONValue]], ...] = (
        ("host", lambda: config.host().url), ("num_parallel", config.num_parallel),
        ("max_loaded_models", config.max_loaded_models), ("keep_alive_s", config.keep_alive),
        ("log_dir", lambda: str(config.log_dir())), ("rpc_servers", lambda: list(config.rpc_servers())))
    for key, get in getters:
        try:
            out[key] = get()
        except LocalrunError as exc:
            errors.append(str(exc))
    return out


def collect_info(
    native: Callable[[], NativeReport] = probe_native,
    host_gpus: Callable[[], list[hostgpu.HostGpu]] = hostgpu.detect,
    cpuinfo: Path = Path("/proc/cpuinfo"),
    repack_known: Callable[[], tuple[bool | None, str]] = repack.known,
) -> Info:
    """Everything ``localrun info`` shows, as a JSON-ready dict (see the module docstring)."""
    import psutil

    errors: list[str] = []
    report: NativeReport | None = None
    try:
        report = native()
    except LocalrunError as exc:
        errors.append(str(exc))
    gpus = host_gpus()
    model, flags = cpu_flags(cpuinfo)
    build = report.build if report else None
    devices = [with_current_ram(d) for d in report.devices] if report else []
    gpu_backends = build.gpu_backends if build else ()
    version = build.llama_cpp_python if build else _installed_version()
    try:
        models = dir_usage(config.models_dir())
    except LocalrunError as exc:
        errors.append(str(exc))
        models = DirUsage()
    vm = psutil.virtual_memory()
    has_amx = any(f in flags for f in AMX_FLAGS)
    repack_ok, repack_why = repack_known()
    if repack_ok is None:
        verdict = " Not probed on this CPU yet: the first model load asks."
    elif repack_ok:
        verdict = " On this CPU it works: models load with repacked weights."
    else:
        verdict = f" On this CPU it crashed ({repack_why}): models load without repacked weights."
    return {
        "localrun": {"version": __version__, "python": platform.python_version(),
                     "executable": sys.executable, "platform": platform.platform()},
        "llama_cpp": {
            "llama_cpp_python": version,
            "ggml_version": build.ggml_version if build else None,
            "ggml_commit": build.ggml_commit if build else None,
            "llama_version": build.llama_version if build else None,
            "system_info": build.system_info if build else None,
            "lib_dir": build.lib_dir if build else None,
        },
        "build": {
            "backend": "+".join(gpu_backends) if gpu_backends else ("CPU" if build else None),
            "gpu_backends": list(gpu_backends),
            "registered_backends": list(build.backends) if build else [],
            "supports_gpu_offload": build.supports_gpu_offload if build else False,
            "supports_rpc": build.supports_rpc if build else False,
        },
        "devices": [d.to_dict() for d in devices],
        "host_gpus": [g.to_dict() for g in gpus],
        "cpu": {
            "model": model, "cores_physical": psutil.cpu_count(logical=False),
            "cores_logical": psutil.cpu_count(logical=True), "arch": platform.machine(),
            "features": parse_system_info(build.system_info) if build else {}, "flags": flags,
        },
        "memory": {"total_bytes": int(vm.total), "available_bytes": int(vm.available)},
        "workarounds": [{
            "name": "no_extra_bufts", "setting": "use_extra_bufts=False", "active": repack_ok is False,
            "applies": repack_ok is False,
            "reason": NO_EXTRA_BUFTS_REASON + verdict + (" This CPU advertises AMX (" + ", ".join(
                f for f in flags if f in AMX_FLAGS) + ")." if has_amx else " This CPU does not advertise AMX."),
        }],
        "models": models,
        "settings": _settings(errors),
        "advice": hostgpu.rebuild_advice(gpus, gpu_backends, sum(1 for d in devices if d.is_gpu),
                                         build.llama_cpp_python) if build else [],
        "errors": errors,
    }


def _installed_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None
