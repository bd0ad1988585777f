"""The fit check: how much memory a model needs and where its layers go.

:func:`read_geometry` gives the :class:`~localrun.store.geometry.ModelGeometry` of a GGUF: the
store's one validated reader (:mod:`localrun.store.gguf_file`), so every count used here was checked
for type and range before any planning. :func:`plan_context` lays out the context (per-request
maximum, KV pool, slots) from the memory free after the weights; :func:`estimate` adds up weights,
KV cache for the pool's tokens (2-byte K and V: bf16 or f16, as the engine allocates) and compute buffers;
:func:`place` decides how many layers go to a GPU and whether the rest fits in RAM.

The numbers are estimates, deliberately on the high side: a model that is refused here would
have failed to allocate or pushed the machine into swap.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from ..engine import limits
from ..engine.types import MAX_UBATCH, LoadOptions, ModelInfo
from ..errors import OptionError
from ..fmt import human_bytes
from ..modelkind import ModelKind
from ..store.geometry import ModelGeometry as ModelGeometry  # the store reader's record, for the runtime
from ..store.gguf_file import read_gguf_cached
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
    """The validated geometry of a GGUF (the store's reader, remembered while the file is unchanged:
    the scheduler and the routes ask for it often); raises InvalidModelFile."""
    return read_gguf_cached(Path(path)).geometry


MAX_AUTO_SLOTS = 16  # batched decode on CPU stops gaining throughput around here (ENGINE_NOTES.md)
POOL_SHARE = 0.5  # of the memory left after the weights: what the KV pool takes by default
EXPLICIT_SHARE = 0.9  # ... and the most an explicit num_ctx may take before it is refused
SLOT_CTX = 4096  # pool tokens each sequence slot brings: what a chat turn needs
FALLBACK_CTX = 4096  # per-request maximum for a GGUF that does not say its trained context


@dataclass(frozen=True, slots=True)
class ContextPlan:
    """How a model's context is laid out: what one request may hold, the pool they share, slots."""

    num_ctx: int        # the most tokens one request may hold (prompt + output)
    context_pool: int   # KV cells the running requests share (the unified KV cache)
    num_parallel: int   # requests decoding at once


def kv_bytes_per_token(geometry: ModelGeometry) -> int:
    """KV cache bytes one token takes in every layer (2-byte K and V: bf16 or f16, engine/native.py)."""
    g = geometry
    return g.n_layer * g.n_head_kv * (g.head_dim_k + g.head_dim_v) * 2


def plan_context(geometry: ModelGeometry, options: LoadOptions, free_ram: int, gpus: list[Device], *,
                 num_ctx: int | None, num_parallel: int | None) -> ContextPlan:
    """The context a model loads with, from the memory left once its weights and compute buffers
    are placed (free RAM, plus free GPU memory when a GPU is there).

    - ``num_parallel`` (LOCALRUN_NUM_PARALLEL) or, when None, one slot per :data:`SLOT_CTX` tokens
      the pool budget (:data:`POOL_SHARE` of that memory) holds, between 1 and :data:`MAX_AUTO_SLOTS`.
    - ``num_ctx``: an explicit per-request maximum (request options, Modelfile or
      LOCALRUN_CONTEXT_LENGTH, already at most the trained context). None: the model's trained
      context, or the whole pool where that is smaller.
    - The pool holds one request at that maximum, or every slot at :data:`SLOT_CTX`, whichever is
      more, within the budget; an explicit ``num_ctx`` gets at least its own size. Requests share
      it (engine/admission.py): a long one does not need every slot reserved at its size.

    Raises OptionError when an explicit ``num_ctx`` needs more than :data:`EXPLICIT_SHARE` of that
    memory, naming both numbers. Pure: the caller probes the memory.

    An embedding model or a reranker has no shared pool: one pooled context of at most
    :data:`~localrun.engine.limits.MAX_POOLED_CTX` tokens, one request at a time (engine/pooled.py).
    """
    if geometry.kind is not ModelKind.GENERATION:
        wanted = num_ctx if num_ctx is not None else (geometry.n_ctx_train or FALLBACK_CTX)
        pooled = max(limits.MIN_CTX, min(wanted, limits.MAX_POOLED_CTX))
        return ContextPlan(num_ctx=pooled, context_pool=pooled, num_parallel=1)
    kv = max(1, kv_bytes_per_token(geometry))
    base = estimate(geometry, dataclasses.replace(options, num_parallel=1, context_pool=MAX_UBATCH))
    left = max(0, free_ram + sum(max(0, g.free_bytes) for g in gpus) - base.weights - base.compute)
    budget = int(left * POOL_SHARE) // kv
    per_slot = SLOT_CTX * kv + geometry.n_vocab * 4  # its share of the pool and a row of logits
    slots = num_parallel or max(1, min(MAX_AUTO_SLOTS, int(left * POOL_SHARE) // per_slot))
    # Never below the engine's smallest context (a GGUF may claim a trained context of 8, and
    # LOCALRUN_CONTEXT_LENGTH is capped there); the engine still holds each request to the trained one.
    if num_ctx is not None:
        num_ctx = max(num_ctx, limits.MIN_CTX)
    wanted = num_ctx if num_ctx is not None else max(geometry.n_ctx_train or FALLBACK_CTX, limits.MIN_CTX)
    pool = min(max(wanted, slots * min(wanted, SLOT_CTX)), max(budget, min(wanted, SLOT_CTX)))
    if num_ctx is None:
        return ContextPlan(num_ctx=min(wanted, pool), context_pool=pool, num_parallel=slots)
    holdable = int(left * EXPLICIT_SHARE) // kv
    if num_ctx > holdable:
        raise OptionError(f"num_ctx {num_ctx} is more than memory can hold: after the weights, "
                          f"{human_bytes(left)} holds at most {holdable} tokens of KV cache "
                          f"({human_bytes(kv)} each)")
    return ContextPlan(num_ctx=num_ctx, context_pool=max(pool, num_ctx), num_parallel=slots)


def estimate(geometry: ModelGeometry, options: LoadOptions) -> MemoryEstimate:
    """Bytes needed to load ``geometry`` with ``options`` (weights + KV cache + compute buffers)."""
    g = geometry
    kv_tokens = options.pool
    kv = kv_tokens * kv_bytes_per_token(g)
    batch = max(1, min(options.num_batch, MAX_UBATCH, kv_tokens))  # buffers follow the physical batch
    # Activations for one batch, plus one row of logits per sequence slot, plus allocator slack.
    compute = batch * (g.n_embd + g.n_ff) * 4 * 4 + max(1, options.num_parallel) * g.n_vocab * 4 + 32 * MiB
    return MemoryEstimate(weights=g.file_size + projector_bytes(options), kv_cache=kv, compute=compute,
                          n_layer=g.n_layer)


def projector_bytes(options: LoadOptions) -> int:
    """A vision model's projector (mmproj): its weights, plus what its encoder computes with (counted
    like its weights once more: a ViT's activations for one image are of the order of its weights)."""
    if not options.projector:
        return 0
    try:
        return 2 * Path(options.projector).stat().st_size
    except OSError:
        return 0  # the load itself says what is wrong with the file


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
