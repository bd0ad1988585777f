"""Compute devices (CPU, CUDA, Metal, Vulkan, ROCm...) as the ggml backend registry reports them.

The only module outside ``localrun/engine`` that touches llama-cpp-python: it calls the ggml device
API exported by the shared libraries llama-cpp-python ships (``ggml_backend_dev_count``,
``ggml_backend_dev_get``, ``_name``, ``_description``, ``_type``, ``_memory``) through ctypes.

Interface::

    Device(name, description, kind: DeviceKind, total_bytes, free_bytes, backend)
    DeviceProbe             protocol: list_devices() -> list[Device]
    GgmlProbe()             in this process (runner processes, which have llama.cpp loaded anyway)
    SubprocessProbe()       in a short-lived child process; the default (see below)
    FakeProbe(devices)      tests: FakeProbe([cpu_device(), fake_gpu(8)]) is an 8 GiB GPU
    list_devices()          the default probe, cached (free memory re-read at most every second)
    invalidate()            drop that cache (call after a model loads or unloads)
    probe_native()          NativeReport(build: BuildInfo, devices) for ``localrun info``

Where a model's layers go on these devices is :mod:`localrun.hardware.placement`'s job.

Why a child process by default: asking a CUDA device for its free memory creates a CUDA context,
which holds a few hundred MB of VRAM for as long as the process lives, and a broken driver can
crash the caller. The daemon must do neither, so it probes in a child that exits at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from ..errors import EngineError
from ..jsontypes import JSONObject

__all__ = [
    "BuildInfo", "Device", "DeviceKind", "DeviceProbe", "FakeProbe", "GgmlProbe", "NativeReport",
    "SubprocessProbe", "cpu_device", "fake_gpu", "invalidate", "list_devices", "probe_native", "with_current_ram",
]

log = logging.getLogger(__name__)
GiB = 1024**3
PROBE_TIMEOUT_S = 60.0  # CUDA initialisation on a cold driver can take tens of seconds
FREE_MEMORY_TTL_S = 1.0
FAILURE_TTL_S = 30.0


class DeviceKind(enum.StrEnum):
    """``enum ggml_backend_dev_type`` in ggml-backend.h (0.3.36 ships ggml 0.25.3)."""

    CPU = "cpu"      # 0: system memory
    GPU = "gpu"      # 1: dedicated memory
    IGPU = "igpu"    # 2: integrated GPU using host memory
    ACCEL = "accel"  # 3: works beside the CPU backend (BLAS, AMX)
    META = "meta"    # 4: wraps other devices for tensor parallelism

    @classmethod
    def from_ggml(cls, value: int) -> DeviceKind:
        order = (cls.CPU, cls.GPU, cls.IGPU, cls.ACCEL, cls.META)
        return order[value] if 0 <= value < len(order) else cls.ACCEL


@dataclass(frozen=True, slots=True)
class Device:
    """One ggml device: the one device type of localrun (probing, planning and the scheduler use it).

    ``backend`` is its registry's name (``CPU``, ``CUDA``, ``Metal``, ``Vulkan``...).
    """

    name: str
    description: str
    kind: DeviceKind
    total_bytes: int
    free_bytes: int
    backend: str

    @property
    def is_gpu(self) -> bool:
        """True for any GPU, dedicated or integrated."""
        return self.kind in (DeviceKind.GPU, DeviceKind.IGPU)

    @property
    def is_igpu(self) -> bool:
        return self.kind is DeviceKind.IGPU

    def to_dict(self) -> JSONObject:
        return {**asdict(self), "kind": str(self.kind)}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Device:
        """The device :meth:`to_dict` wrote (the probe's payload); KeyError, ValueError or TypeError if not one."""
        return cls(str(d["name"]), str(d.get("description", "")), DeviceKind(str(d["kind"])),
                   _byte_count(d["total_bytes"]), _byte_count(d["free_bytes"]), str(d.get("backend", "")))


def _byte_count(value: object) -> int:
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"a byte count must be a number, not {type(value).__name__}")
    return int(value)


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """What the installed llama-cpp-python was built with."""

    llama_cpp_python: str
    ggml_version: str | None
    ggml_commit: str | None
    llama_version: str | None
    system_info: str
    supports_gpu_offload: bool
    backends: tuple[str, ...]
    lib_dir: str
    supports_rpc: bool = False  # built with -DGGML_RPC=on (LOCALRUN_RPC_SERVERS can work)

    @property
    def gpu_backends(self) -> tuple[str, ...]:
        """Registered backends that drive a GPU, with canonical names (``Metal`` for ``MTL``)."""
        out = []
        for b in self.backends:
            label = _GPU_BACKENDS.get(b.lower())
            if label and label not in out:
                out.append(label)
        return tuple(out)


_GPU_BACKENDS = {"cuda": "CUDA", "rocm": "ROCm", "hip": "ROCm", "musa": "MUSA", "metal": "Metal",
                 "mtl": "Metal", "vulkan": "Vulkan", "sycl": "SYCL", "opencl": "OpenCL", "cann": "CANN",
                 "webgpu": "WebGPU", "virtgpu": "VirtGPU"}


@dataclass(frozen=True, slots=True)
class NativeReport:
    build: BuildInfo
    devices: tuple[Device, ...]


class DeviceProbe(Protocol):
    def list_devices(self) -> list[Device]: ...


def cpu_device(total_gib: float = 16, free_gib: float | None = None) -> Device:
    """A CPU device of the given size, for tests."""
    free = total_gib if free_gib is None else free_gib
    return Device("CPU", "test CPU", DeviceKind.CPU, int(total_gib * GiB), int(free * GiB), "CPU")


def fake_gpu(total_gib: float = 8, free_gib: float | None = None, name: str = "CUDA0",
             kind: DeviceKind = DeviceKind.GPU) -> Device:
    """A GPU of the given size (free = total unless given), for tests."""
    free = total_gib if free_gib is None else free_gib
    return Device(name, f"fake {total_gib:g} GiB GPU", kind, int(total_gib * GiB), int(free * GiB), "CUDA")


class FakeProbe:
    """A probe returning fixed devices; ``devices`` may be replaced between calls."""

    def __init__(self, devices: Iterable[Device]) -> None:
        self.devices = list(devices)

    def list_devices(self) -> list[Device]:
        return list(self.devices)


# --- the real thing: ctypes over the ggml backend registry -------------------------------------

class _Ggml:
    """ctypes bindings for the ggml backend API; symbols looked up in libllama then libggml*."""

    def __init__(self) -> None:
        try:
            import llama_cpp
            from llama_cpp import llama_cpp as low
        except Exception as exc:  # ImportError, or OSError when a shared library fails to load
            raise EngineError(f"llama-cpp-python cannot be loaded: {exc}") from exc
        self.llama_cpp = llama_cpp
        self.lib_dir = Path(getattr(low, "_base_path", Path(llama_cpp.__file__).parent / "lib"))
        self.handles: list[Any] = [low._lib]
        for stem in ("ggml", "ggml-base"):
            for cand in (f"lib{stem}.so", f"lib{stem}.dylib", f"{stem}.dll", f"lib{stem}.dll"):
                if (self.lib_dir / cand).exists():
                    with contextlib.suppress(OSError):
                        self.handles.append(ctypes.CDLL(str(self.lib_dir / cand)))
                    break

    def fn(self, name: str, restype: Any, *argtypes: Any) -> Any:
        for handle in self.handles:
            try:
                f = getattr(handle, name)
            except AttributeError:
                continue
            f.restype, f.argtypes = restype, list(argtypes)
            return f
        return None

    def text(self, name: str) -> str | None:
        f = self.fn(name, ctypes.c_char_p)
        raw = f() if f else None
        return raw.decode("utf-8", "replace") if raw else None

    def backends(self) -> list[str]:
        count = self.fn("ggml_backend_reg_count", ctypes.c_size_t)
        get = self.fn("ggml_backend_reg_get", ctypes.c_void_p, ctypes.c_size_t)
        name = self.fn("ggml_backend_reg_name", ctypes.c_char_p, ctypes.c_void_p)
        if not (count and get and name):
            return []
        return [name(get(i)).decode("utf-8", "replace") for i in range(count())]

    def load_dynamic_backends(self) -> None:
        """Register backends built as loadable modules (GGML_BACKEND_DL) that are not registered yet."""
        have = {b.lower() for b in self.backends()}
        pending = []
        for path in self.lib_dir.glob("*ggml-*"):
            stem = path.name.split(".")[0].removeprefix("lib").removeprefix("ggml-")
            if stem in ("base",) or stem.split("-")[0] in have:
                continue
            pending.append(stem)
        load_all = self.fn("ggml_backend_load_all_from_path", None, ctypes.c_char_p)
        if pending and load_all:
            log.debug("loading dynamic ggml backends from %s: %s", self.lib_dir, pending)
            load_all(str(self.lib_dir).encode())

    def devices(self) -> list[Device]:
        count = self.fn("ggml_backend_dev_count", ctypes.c_size_t)
        get = self.fn("ggml_backend_dev_get", ctypes.c_void_p, ctypes.c_size_t)
        if not (count and get):
            raise EngineError("this llama.cpp build does not export the ggml backend device API")
        name = self.fn("ggml_backend_dev_name", ctypes.c_char_p, ctypes.c_void_p)
        desc = self.fn("ggml_backend_dev_description", ctypes.c_char_p, ctypes.c_void_p)
        dtype = self.fn("ggml_backend_dev_type", ctypes.c_int, ctypes.c_void_p)
        memory = self.fn("ggml_backend_dev_memory", None, ctypes.c_void_p,
                         ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
        reg = self.fn("ggml_backend_dev_backend_reg", ctypes.c_void_p, ctypes.c_void_p)
        reg_name = self.fn("ggml_backend_reg_name", ctypes.c_char_p, ctypes.c_void_p)
        out = []
        for i in range(count()):
            dev = get(i)
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            memory(dev, ctypes.byref(free), ctypes.byref(total))
            backend = reg_name(reg(dev)) if reg and reg_name else b""
            out.append(Device(
                name=(name(dev) or b"?").decode("utf-8", "replace"),
                description=(desc(dev) or b"").decode("utf-8", "replace").strip(),
                kind=DeviceKind.from_ggml(int(dtype(dev))),
                total_bytes=int(total.value), free_bytes=int(free.value),
                backend=(backend or b"").decode("utf-8", "replace"),
            ))
        return out

    def build(self) -> BuildInfo:
        lc = self.llama_cpp
        return BuildInfo(
            llama_cpp_python=str(getattr(lc, "__version__", "unknown")),
            ggml_version=self.text("ggml_version"),
            ggml_commit=self.text("ggml_commit"),
            llama_version=self.text("llama_version"),
            system_info=lc.llama_print_system_info().decode("utf-8", "replace").strip(),
            supports_gpu_offload=bool(lc.llama_supports_gpu_offload()),
            backends=tuple(self.backends()),
            lib_dir=str(self.lib_dir),
            supports_rpc=bool(lc.llama_supports_rpc()),
        )


_native: _Ggml | None = None
_native_lock = threading.Lock()


def _ggml() -> _Ggml:
    global _native
    with _native_lock:
        if _native is None:
            native = _Ggml()
            native.load_dynamic_backends()
            _native = native
        return _native


class GgmlProbe:
    """Lists devices in this process (loads llama.cpp here; see the module docstring)."""

    def list_devices(self) -> list[Device]:
        return _ggml().devices()


def _native_report_in_process() -> NativeReport:
    native = _ggml()
    return NativeReport(build=native.build(), devices=tuple(native.devices()))


_CHILD = "from localrun.hardware.devices import _print_report; _print_report()"
_MARK = "LOCALRUN_DEVICES "


def _print_report() -> None:
    """Child side of :class:`SubprocessProbe`: one marked JSON line on stdout."""
    try:
        report = _native_report_in_process()
        payload: dict[str, object] = {"build": asdict(report.build),
                                   "devices": [d.to_dict() for d in report.devices]}
    except Exception as exc:  # reported to the parent, which raises it as EngineError
        payload = {"error": str(exc) or type(exc).__name__}
    sys.stdout.write(_MARK + json.dumps(payload) + "\n")
    sys.stdout.flush()


class SubprocessProbe:
    """Probes in a child process (``sys.executable``), so the caller never loads a GPU driver."""

    def __init__(self, python: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> None:
        self.python = python or sys.executable
        self.timeout = timeout

    def report(self) -> NativeReport:
        try:
            proc = subprocess.run([self.python, "-c", _CHILD], capture_output=True, text=True,
                                  timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise EngineError(f"device probe did not answer within {self.timeout:.0f} s") from exc
        except OSError as exc:
            raise EngineError(f"device probe could not start {self.python}: {exc}") from exc
        line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(_MARK)), None)
        if line is None:
            tail = " ".join(proc.stderr.strip().splitlines()[-3:])
            raise EngineError(f"device probe exited with status {proc.returncode}: {tail or 'no output'}")
        payload = json.loads(line[len(_MARK):])
        if "error" in payload:
            raise EngineError(f"device probe failed: {payload['error']}")
        b = payload["build"]
        build = BuildInfo(**{**b, "backends": tuple(b["backends"])})
        return NativeReport(build=build, devices=tuple(Device.from_dict(d) for d in payload["devices"]))

    def list_devices(self) -> list[Device]:
        return list(self.report().devices)


def probe_native(in_process: bool = False) -> NativeReport:
    """Build info and devices; in a child process unless ``in_process``. Raises EngineError."""
    return _native_report_in_process() if in_process else SubprocessProbe().report()


class _Cache:
    """``list_devices()``'s cache: a GPU machine is re-probed after FREE_MEMORY_TTL_S; a machine
    without GPUs is probed once (its CPU free memory is then refreshed from psutil)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.devices: list[Device] | None = None
        self.at = 0.0
        self.error: EngineError | None = None  # a failed probe is not retried for FAILURE_TTL_S

    def get(self, probe: DeviceProbe) -> list[Device]:
        with self.lock:
            if self.error is not None and time.monotonic() - self.at < FAILURE_TTL_S:
                raise self.error
            self.error = None
            fresh = self.devices is not None and (
                not any(d.is_gpu for d in self.devices) or time.monotonic() - self.at < FREE_MEMORY_TTL_S)
            if not fresh:
                try:
                    self.devices, self.at = probe.list_devices(), time.monotonic()
                except EngineError as exc:
                    self.error, self.at = exc, time.monotonic()
                    raise
            assert self.devices is not None
            return [with_current_ram(d) for d in self.devices]

    def invalidate(self) -> None:
        """Forget free GPU memory. A machine probed without GPUs keeps its list: its devices do not
        change, and CPU memory is read from psutil at every get (a model switch there used to wait
        0.3-0.8 s for a probe process, issue #15)."""
        with self.lock:
            if self.devices is not None and not any(d.is_gpu for d in self.devices):
                return
            self.devices, self.error = None, None


def with_current_ram(d: Device) -> Device:
    """``d`` with the RAM figures psutil reports now, when it is a CPU device (ggml's CPU device
    reports total RAM as free)."""
    if d.kind is not DeviceKind.CPU:
        return d
    import psutil

    vm = psutil.virtual_memory()
    return replace(d, free_bytes=int(vm.available), total_bytes=int(vm.total))


_cache = _Cache()


def list_devices(probe: DeviceProbe | None = None) -> list[Device]:
    """Every device (CPU first, as ggml lists them), with total and free memory.

    With no ``probe``, uses a cached :class:`SubprocessProbe`; raises EngineError when
    llama-cpp-python cannot be loaded or the probe fails.
    """
    if probe is not None:
        return probe.list_devices()
    return _cache.get(SubprocessProbe())


def invalidate() -> None:
    """Loads and unloads changed free memory: the next :func:`list_devices` probes a GPU machine again."""
    _cache.invalidate()
