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
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..engine.types import MAX_UBATCH, LoadOptions, ModelInfo
from ..errors import InvalidModelFile
from ..store.geometry import ModelGeometry as ModelGeometry  # the store reader's record, for the runtime
from ..store.gguf_file import read_gguf
from . import devices
from .devices import Device
from .placement import Placement, plan_offload

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


def reconcile(placement: Placement, info: ModelInfo | None) -> Placement:
    """The placement as llama.cpp reports it made it (its load log), where that differs from the plan.

    ``info`` is the loaded engine's ModelInfo (``gpu_layers``, ``offload_layers``, ``gpu_buffer_bytes``);
    without a report (None, or no offloadable layers counted) the plan stands. The model's total size is
    kept and split between RAM and VRAM in proportion to the weights llama.cpp put in GPU buffers.
    """
    if info is None or not info.offload_layers:
        return placement
    gpu_layers, total = info.gpu_layers, info.offload_layers
    if gpu_layers == placement.gpu_layers:
        return placement
    size = placement.size
    gpu_bytes, cpu_bytes = info.gpu_buffer_bytes, info.cpu_buffer_bytes
    share = gpu_bytes / (gpu_bytes + cpu_bytes) if gpu_layers and gpu_bytes + cpu_bytes else gpu_layers / total
    vram = round(size * share) if gpu_layers else 0
    by_device = placement.vram_by_device if vram else ()
    return dataclasses.replace(placement, gpu_layers=gpu_layers, total_layers=total, ram=size - vram,
                               vram=vram, vram_by_device=by_device)


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


MAX_AUTO_SLOTS = 16  # batched decode on CPU stops gaining throughput around here (ENGINE_NOTES.md)
SLOT_SHARE = 0.5  # of the memory left after the weights: what default_slots may give the KV cache


def kv_bytes_per_token(geometry: ModelGeometry) -> int:
    """KV cache bytes one token takes in every layer (2-byte K and V: bf16 or f16, engine/native.py)."""
    g = geometry
    return g.n_layer * g.n_head_kv * (g.head_dim_k + g.head_dim_v) * 2


def default_slots(geometry: ModelGeometry, options: LoadOptions, free_ram: int, gpus: list[Device]) -> int:
    """How many sequence slots to load ``geometry`` with when the user did not say.

    Each slot costs ``num_ctx`` tokens of KV cache plus a row of logits. Up to :data:`SLOT_SHARE`
    of the memory left once the weights and compute buffers are placed (free RAM, plus free GPU
    memory when a GPU is there) goes to slots, between 1 and :data:`MAX_AUTO_SLOTS`. Ollama sizes
    its parallelism from free memory too; on a 24 GB machine a small model gets 16.
    """
    base = estimate(geometry, dataclasses.replace(options, num_parallel=1))
    per_slot = options.num_ctx * kv_bytes_per_token(geometry) + geometry.n_vocab * 4
    left = free_ram + sum(max(0, g.free_bytes) for g in gpus) - base.weights - base.compute
    return max(1, min(MAX_AUTO_SLOTS, int(left * SLOT_SHARE) // max(1, per_slot)))


def estimate(geometry: ModelGeometry, options: LoadOptions) -> MemoryEstimate:
    """Bytes needed to load ``geometry`` with ``options`` (weights + KV cache + compute buffers)."""
    g = geometry
    kv_tokens = options.num_ctx * max(1, options.num_parallel)
    kv = kv_tokens * kv_bytes_per_token(g)
    batch = max(1, min(options.num_batch, MAX_UBATCH, kv_tokens))  # buffers follow the physical batch
    # Activations for one batch, plus one row of logits per sequence slot, plus allocator slack.
    compute = batch * (g.n_embd + g.n_ff) * 4 * 4 + max(1, options.num_parallel) * g.n_vocab * 4 + 32 * MiB
    return MemoryEstimate(weights=g.file_size, kv_cache=kv, compute=compute, n_layer=g.n_layer)


def place(est: MemoryEstimate, options: LoadOptions, gpus: list[Device]) -> Placement:
    """Choose how many layers to offload with :func:`~localrun.hardware.placement.plan_offload`
    (llama.cpp's rules): ``num_gpu`` when given, else as many as fit in each GPU's free memory (minus a reserve).
    """
    n = max(1, est.n_layer)
    per_layer = est.weights // (n + 2)  # n blocks + token embeddings (CPU) + output layer
    return plan_offload(
        n, per_layer, kv_bytes_per_layer=est.kv_cache // n, output_bytes=per_layer, input_bytes=per_layer,
        compute_bytes=est.compute, devices=gpus, num_gpu=options.num_gpu,
    )


def system_devices() -> tuple[int, list[Device]]:
    """Free RAM (psutil's "available") and the GPUs the ggml backend reports.

    Uses :func:`localrun.hardware.devices.list_devices` (probed in a child process, cached); when
    probing fails, CPU only. Blocking: call it from a thread.
    """
    import psutil

    free_ram = int(psutil.virtual_memory().available)
    try:
        listed = devices.list_devices()
    except Exception as exc:  # a broken GPU driver (EngineError, or worse) must not stop CPU inference
        log.warning("device probe failed, planning for CPU only: %s", exc)
        return free_ram, []
    # Accelerators beside the CPU (BLAS, AMX) hold no layers of their own.
    return free_ram, [d for d in listed if d.is_gpu]


def devices_changed() -> None:
    """Tell the device probe that free memory changed (a model loaded or unloaded)."""
    devices.invalidate()
