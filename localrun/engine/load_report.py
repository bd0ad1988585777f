"""What llama.cpp says it did when it loaded a model: :func:`parse_load_report` reads the
``load_tensors:`` lines of its load log (some at DEBUG level, so the engine's log callback must keep
them) into a :class:`LoadReport` saying which device got each layer and how big each device's weight
buffer is. The engine puts the summary in ``ModelInfo``; :func:`localrun.hardware.memory.reconcile`
corrects the planned :class:`~localrun.hardware.placement.Placement` with it. Pure: no llama_cpp import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MiB = 1024 * 1024

_LAYER_RE = re.compile(r"load_tensors: layer\s+(\d+) assigned to device (\S+?),")
_BUFFER_RE = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
_OFFLOADED_RE = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")
_HOST_BUFFERS = ("CPU", "CPU_Mapped", "CPU_REPACK", "CPU_AARCH64")


@dataclass(frozen=True, slots=True)
class LoadReport:
    """llama.cpp's own account of a model load.

    ``layer_devices`` maps each offloadable layer (``0..n_layers``; the last is the output layer) to
    the device name llama.cpp chose; ``buffers`` maps buffer names (``CPU_Mapped``, ``CUDA0``...) to
    bytes; ``offloaded`` is llama.cpp's ``(k, n)`` "offloaded k/n layers to GPU" line, when printed.
    """

    layer_devices: dict[int, str]
    buffers: dict[str, int]
    offloaded: tuple[int, int] | None = None

    @property
    def gpu_layers(self) -> int:
        if self.layer_devices:
            return sum(1 for d in self.layer_devices.values() if not d.upper().startswith("CPU"))
        return self.offloaded[0] if self.offloaded else 0

    @property
    def total_layers(self) -> int:
        if self.layer_devices:
            return len(self.layer_devices)
        return self.offloaded[1] if self.offloaded else 0

    @property
    def cpu_bytes(self) -> int:
        return sum(b for name, b in self.buffers.items() if _is_host_buffer(name))

    @property
    def gpu_bytes(self) -> int:
        return sum(b for name, b in self.buffers.items() if not _is_host_buffer(name))


def _is_host_buffer(name: str) -> bool:
    # "CUDA_Host" is pinned host memory, not VRAM.
    return name in _HOST_BUFFERS or name.startswith("CPU") or name.endswith("_Host")


def parse_load_report(log_text: str) -> LoadReport:
    """Read the ``load_tensors:`` lines of llama.cpp's model-load log (other lines are ignored)."""
    layers: dict[int, str] = {}
    buffers: dict[str, int] = {}
    offloaded: tuple[int, int] | None = None
    for line in log_text.splitlines():
        if m := _LAYER_RE.search(line):
            layers[int(m.group(1))] = m.group(2)
        elif m := _BUFFER_RE.search(line):
            buffers[m.group(1)] = buffers.get(m.group(1), 0) + int(float(m.group(2)) * MiB)
        elif m := _OFFLOADED_RE.search(line):
            offloaded = (int(m.group(1)), int(m.group(2)))
    return LoadReport(layer_devices=layers, buffers=buffers, offloaded=offloaded)
