"""Layer offload planning and reading back what llama.cpp placed. Pure: no llama_cpp import.

:func:`plan_offload` mirrors how llama.cpp's ``load_tensors`` assigns layers, so the plan is what the
runner will get when it passes ``Placement.gpu_layers`` as ``n_gpu_layers``:

- a model has ``n_layers`` repeating blocks plus one output layer: ``n_layers + 1`` offloadable layers
  (Ollama and llama.cpp both count "33/33 layers" for a 32-block model); the input (token
  embedding) layer always stays on the CPU;
- ``n_gpu_layers = k`` puts the *last* ``k`` of them on GPUs: the output layer first, then blocks
  ``n_layers-1, n_layers-2, ...``;
- with several GPUs the offloaded layers are split in proportion to each GPU's free memory (llama.cpp's
  default when ``tensor_split`` is unset), consecutive layers on the same device;
- the KV cache of a layer lives on that layer's device (llama.cpp's default ``offload_kqv``);
- only ``GPU`` devices take layers; integrated GPUs (``IGPU``) only when no discrete GPU exists.

Signature (keyword-only after ``n_layers``/``bytes_per_layer``)::

    plan_offload(n_layers, bytes_per_layer, *, kv_bytes_per_layer=0, output_bytes=0,
                 input_bytes=0, compute_bytes=0, devices=(), num_gpu=None,
                 reserve_bytes=DEFAULT_RESERVE) -> Placement

``num_gpu=None`` offloads as many layers as fit in each GPU's free memory minus ``reserve_bytes``
and ``compute_bytes``; an explicit ``num_gpu`` (Ollama's option) is honoured even when it does not
fit (``Placement.fits`` is then False), clamped to ``0..n_layers+1``; a negative ``num_gpu``
means "all layers", as in llama.cpp.

:class:`Placement` is the one placement record: the planner returns it, the scheduler keeps it per
resident model (corrected by :func:`localrun.hardware.memory.reconcile` from what llama.cpp reports
it did, see :mod:`localrun.engine.load_report`) and ``/api/ps`` shows its :meth:`Placement.processor`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..fmt import processor_split
from .devices import Device

MiB = 1024 * 1024
# Layer counts come from a validated ModelGeometry (at most localrun.store.geometry.MAX_LAYERS, llama.cpp's
# 512); this cap only keeps a caller that skipped validation from building per-layer lists of any size.
MAX_PLANNED_LAYERS = 4096
DEFAULT_RESERVE = 512 * MiB  # left free on every GPU for the driver, other programs and fragmentation


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a model goes: ``gpu_layers`` of its ``total_layers`` offloadable layers on GPUs, the rest in RAM.

    ``ram`` and ``vram`` are bytes (``size`` is their sum); ``vram_by_device`` and ``layers_per_device``
    name each device holding a part, in order (``layers_per_device`` names the CPU as ``"CPU"``);
    ``tensor_split`` is llama.cpp's split between several GPUs (empty for one). ``fits`` is False only
    when an explicit ``num_gpu`` asks for more than the GPUs hold (honoured anyway, as Ollama does).
    """

    gpu_layers: int
    ram: int
    vram: int
    total_layers: int = 1
    vram_by_device: tuple[tuple[str, int], ...] = ()
    fits: bool = True
    layers_per_device: tuple[tuple[str, int], ...] = ()
    tensor_split: tuple[float, ...] = field(default=())

    @property
    def size(self) -> int:
        return self.ram + self.vram

    def processor(self) -> str:
        """Ollama's PROCESSOR column: ``100% CPU``, ``100% GPU`` or ``48%/52% CPU/GPU`` (by bytes)."""
        return processor_split(self.ram, self.vram, self.gpu_layers, self.total_layers)


def offload_targets(devices: Iterable[Device]) -> list[Device]:
    """The devices llama.cpp offloads layers to: discrete GPUs, else integrated ones."""
    listed = list(devices)
    gpus = [d for d in listed if d.is_gpu and not d.is_igpu]
    return gpus or [d for d in listed if d.is_igpu]


def _assign(n_total: int, k: int, weights: Sequence[int]) -> list[int | None]:
    """Device index per offloadable layer (None = CPU), as llama.cpp's ``get_layer_buft_list``."""
    start = n_total - k
    shares = list(weights) if sum(weights) > 0 else [1] * len(weights)
    cumulative, acc = [], 0.0
    for w in shares:
        acc += w / sum(shares)
        cumulative.append(acc)
    out: list[int | None] = []
    for il in range(n_total):
        if il < start:
            out.append(None)
        else:
            idx = bisect.bisect_right(cumulative, (il - start) / k)
            out.append(min(idx, len(weights) - 1))
    return out


def plan_offload(
    n_layers: int,
    bytes_per_layer: int,
    *,
    kv_bytes_per_layer: int = 0,
    output_bytes: int = 0,
    input_bytes: int = 0,
    compute_bytes: int = 0,
    devices: Iterable[Device] = (),
    num_gpu: int | None = None,
    reserve_bytes: int = DEFAULT_RESERVE,
) -> Placement:
    """Plan the offload of a model with ``n_layers`` repeating blocks (see the module docstring).

    ``bytes_per_layer``: weights of one block; ``kv_bytes_per_layer``: its KV cache for all sequence
    slots; ``output_bytes``: the output layer (final norm + LM head; 0 when tied to the embeddings);
    ``input_bytes``: token embeddings (always CPU); ``compute_bytes``: scratch buffer needed on each
    device that holds layers (and on the CPU). Raises ValueError on negative sizes and on more than
    ``MAX_PLANNED_LAYERS`` layers.
    """
    if n_layers < 0 or min(bytes_per_layer, kv_bytes_per_layer, output_bytes, input_bytes, compute_bytes) < 0:
        raise ValueError("layer counts and sizes must not be negative")
    if n_layers > MAX_PLANNED_LAYERS:
        raise ValueError(f"{n_layers} layers is more than any model has (at most {MAX_PLANNED_LAYERS})")
    n_total = n_layers + 1
    gpus = offload_targets(devices)
    layer_bytes = [bytes_per_layer + kv_bytes_per_layer] * n_layers + [output_bytes]

    def build(k: int) -> tuple[list[int], int, list[int | None]]:
        where: list[int | None] = [None] * n_total
        if k and gpus:
            where = _assign(n_total, k, [max(0, g.free_bytes) for g in gpus])
        per_gpu = [0] * len(gpus)
        cpu = input_bytes + compute_bytes
        for il, dev in enumerate(where):
            if dev is None:
                cpu += layer_bytes[il]
            else:
                per_gpu[dev] += layer_bytes[il]
        per_gpu = [b + compute_bytes if b else 0 for b in per_gpu]
        return per_gpu, cpu, where

    def fits(per_gpu: list[int]) -> bool:
        return all(b <= max(0, g.free_bytes - reserve_bytes) for b, g in zip(per_gpu, gpus, strict=False) if b)

    if not gpus:
        k = 0
    elif num_gpu is None:
        k = next((k for k in range(n_total, -1, -1) if fits(build(k)[0])), 0)
    else:
        k = n_total if num_gpu < 0 else min(num_gpu, n_total)
    per_gpu, cpu, where = build(k)
    layers_on = [sum(1 for d in where if d == i) for i in range(len(gpus))]
    layers = [("CPU", sum(1 for d in where if d is None))]
    layers += [(g.name, n) for g, n in zip(gpus, layers_on, strict=False) if n]
    split: tuple[float, ...] = ()
    if k and len(gpus) > 1:
        split = tuple(round(n / k, 4) for n in layers_on)
    return Placement(
        gpu_layers=k, ram=cpu, vram=sum(per_gpu), total_layers=n_total,
        vram_by_device=tuple((g.name, b) for g, b in zip(gpus, per_gpu, strict=False) if b), fits=fits(per_gpu),
        layers_per_device=tuple(layers), tensor_split=split,
    )
