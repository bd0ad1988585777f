"""The fit check: how much memory a model needs and where its layers go.

:func:`read_geometry` gives the :class:`~localrun.store.geometry.ModelGeometry` of a GGUF: the
store's one validated reader (:mod:`localrun.store.gguf_file`), so every count used here was checked
for type and range before any planning. :func:`estimate` adds up weights, KV cache for
``num_ctx * num_parallel`` tokens (2-byte K and V: bf16 or f16, as the engine allocates) and compute buffers;
:func:`place` decides how many layers go to a GPU and whether the rest fits in RAM.

The numbers are estimates, deliberately on the high side: a model that is refused here would
have failed to allocate or pushed the machine into swap.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..engine.types import LoadOptions
from ..errors import InvalidModelFile
from ..store.geometry import ModelGeometry as ModelGeometry  # the store reader's record, for the runtime
from ..store.gguf_file import read_gguf

log = logging.getLogger(__name__)

MiB = 1024 * 1024
GiB = 1024 * MiB


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    weights: int
    kv_cache: int
    compute: int
    n_layer: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute

    @property
    def per_layer(self) -> int:
        """Bytes one repeating layer adds where it lives (weights + its share of the KV cache)."""
        return (self.weights + self.kv_cache) // max(1, self.n_layer + 1)


@dataclass(frozen=True, slots=True)
class Device:
    """A memory pool the planner may put layers on: ``kind`` is "gpu" or "igpu"."""

    name: str
    kind: str
    total: int
    free: int

    # The names localrun.offload's planner reads.
    @property
    def free_bytes(self) -> int:
        return self.free

    @property
    def is_gpu(self) -> bool:
        return self.kind in ("gpu", "igpu")

    @property
    def is_igpu(self) -> bool:
        return self.kind == "igpu"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a model goes: ``gpu_layers`` of its layers on GPUs, the rest in RAM.

    ``vram_by_device`` names each GPU holding a part; ``fits`` is False only when an explicit
    ``num_gpu`` asks for more than the GPUs hold (honoured anyway, as Ollama does).
    """

    gpu_layers: int
    ram: int
    vram: int
    total_layers: int = 1
    vram_by_device: tuple[tuple[str, int], ...] = ()
    fits: bool = True

    @property
    def size(self) -> int:
        return self.ram + self.vram

    def processor(self) -> str:
        """Ollama's PROCESSOR column: ``100% CPU``, ``100% GPU`` or ``48%/52% CPU/GPU``."""
        from .placement import processor_split

        return processor_split(self.ram, self.vram, self.gpu_layers, self.total_layers)


def reconcile(placement: Placement, info: Mapping[str, Any] | None) -> Placement:
    """The placement as llama.cpp reports it made it (its load log), where that differs from the plan.

    ``info`` is the loaded engine's ModelInfo as a mapping (``gpu_layers``, ``offload_layers``,
    ``gpu_buffer_bytes``); without a report the plan stands. The model's total size is kept and
    split between RAM and VRAM in proportion to the weights llama.cpp put in GPU buffers.
    """
    if not info or not int(info.get("offload_layers") or 0):
        return placement
    gpu_layers, total = int(info.get("gpu_layers") or 0), int(info["offload_layers"])
    if gpu_layers == placement.gpu_layers:
        return placement
    size = placement.size
    gpu_bytes, cpu_bytes = int(info.get("gpu_buffer_bytes") or 0), int(info.get("cpu_buffer_bytes") or 0)
    share = gpu_bytes / (gpu_bytes + cpu_bytes) if gpu_layers and gpu_bytes + cpu_bytes else gpu_layers / total
    vram = round(size * share) if gpu_layers else 0
    devices = placement.vram_by_device if vram else ()
    return dataclasses.replace(placement, gpu_layers=gpu_layers, total_layers=total, ram=size - vram,
                               vram=vram, vram_by_device=devices)


def read_geometry(path: str | Path) -> ModelGeometry:
    """The validated geometry of a GGUF (the store's reader); raises InvalidModelFile.

    Cached by path, size and modification time: the scheduler and the routes ask for it often.
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise InvalidModelFile(f"cannot read model file {p}: {exc.strerror}") from exc
    return _read_geometry_cached(str(p), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _read_geometry_cached(path: str, _size: int, _mtime: int) -> ModelGeometry:
    return read_gguf(Path(path)).geometry


def estimate(geometry: ModelGeometry, options: LoadOptions) -> MemoryEstimate:
    """Bytes needed to load ``geometry`` with ``options`` (weights + KV cache + compute buffers)."""
    g = geometry
    kv_tokens = options.num_ctx * max(1, options.num_parallel)
    kv = kv_tokens * g.n_layer * g.n_head_kv * (g.head_dim_k + g.head_dim_v) * 2  # bf16 or f16 K and V (engine/native.py)
    batch = max(1, min(options.num_batch, kv_tokens))
    # Activations for one batch, plus one row of logits per sequence slot, plus allocator slack.
    compute = batch * (g.n_embd + g.n_ff) * 4 * 4 + max(1, options.num_parallel) * g.n_vocab * 4 + 32 * MiB
    return MemoryEstimate(weights=g.file_size, kv_cache=kv, compute=compute, n_layer=g.n_layer)


def place(est: MemoryEstimate, options: LoadOptions, gpus: list[Device]) -> Placement:
    """Choose how many layers to offload with :func:`localrun.offload.plan_offload` (llama.cpp's rules):
    ``num_gpu`` when given, else as many as fit in each GPU's free memory (minus a reserve).
    """
    from .placement import plan_offload

    n = max(1, est.n_layer)
    per_layer = est.weights // (n + 2)  # n blocks + token embeddings (CPU) + output layer
    plan = plan_offload(
        n, per_layer, kv_bytes_per_layer=est.kv_cache // n, output_bytes=per_layer, input_bytes=per_layer,
        compute_bytes=est.compute, devices=gpus, num_gpu=options.num_gpu,
    )
    return Placement(
        gpu_layers=plan.gpu_layers, ram=plan.cpu_bytes, vram=plan.gpu_bytes, total_layers=plan.total_layers,
        vram_by_device=tuple((name, b) for name, b in plan.bytes_per_device if name != "CPU"), fits=plan.fits,
    )


def system_devices() -> tuple[int, list[Device]]:
    """Free RAM (psutil's "available") and the GPUs the ggml backend reports.

    Uses :func:`localrun.devices.list_devices` (probed in a child process, cached) when that
    module exists; otherwise, or when probing fails, CPU only. Blocking: call it from a thread.
    """
    import psutil

    free_ram = int(psutil.virtual_memory().available)
    gpus: list[Device] = []
    try:
        from . import devices as devmod
    except ImportError:
        return free_ram, gpus
    try:
        listed = devmod.list_devices()
    except Exception as exc:  # a broken GPU driver must not stop CPU inference
        log.warning("device probe failed, planning for CPU only: %s", exc)
        return free_ram, gpus
    for d in listed:
        is_gpu = getattr(d, "is_gpu", None)
        if is_gpu is None:
            is_gpu = str(getattr(d, "kind", "cpu")).lower() in ("gpu", "igpu")
        if is_gpu:  # accelerators beside the CPU (BLAS, AMX) hold no layers of their own
            kind = "igpu" if getattr(d, "is_igpu", False) else "gpu"
            gpus.append(Device(str(d.name), kind, int(d.total), int(d.free)))
    return free_ram, gpus


def devices_changed() -> None:
    """Tell the device probe that free memory changed (a model loaded or unloaded)."""
    try:
        from . import devices as devmod
    except ImportError:
        return
    invalidate = getattr(devmod, "invalidate", None)
    if invalidate is not None:
        invalidate()


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"

