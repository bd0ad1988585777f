"""Quantizing a model's weights as it is created (``localrun create -q Q4_K_M``, ``/api/create``'s
``quantize``), as ``ollama create --quantize`` does.

Only unquantized weights (F32, F16, BF16) are quantized, Ollama's rule: quantizing already
quantized weights again loses quality for nothing, so it is a 400 naming the file's type. The
work is llama.cpp's own quantizer (:mod:`localrun.engine.quantize`, in a child process: minutes
and gigabytes for a real model, and no crash of it reaches the daemon); the output is byte for
byte what ``llama-quantize`` writes for the same file and type. Progress is reported per tensor
as ``quantizing F16 model to Q4_K_M``, ``completed`` of ``total`` counting the source's bytes by the
share of its tensors done.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from ..errors import InvalidModelFile, InvalidRequest
from .blobs import temp_file
from .ggml_types import FILE_TYPES
from .gguf_file import GGUFInfo, read_gguf
from .progress import ProgressFn, report

QUANTIZABLE = ("F32", "F16", "BF16")
# The types `quantize` accepts: llama-quantize's legacy and K-quants (the i-quants need an importance
# matrix). Their llama_ftype numbers are ggml_types.FILE_TYPES's.
TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M",
         "Q5_K_S", "Q5_K_M", "Q6_K")
_FTYPE = {name: number for number, name in FILE_TYPES.items() if name in TYPES}


def quant_type(value: object) -> str:
    """``value`` as one of :data:`TYPES` (any case: ``q4_K_M``, ``Q4_K_M``); InvalidRequest otherwise."""
    if isinstance(value, str) and value.strip().upper() in TYPES:
        return value.strip().upper()
    raise InvalidRequest(f"unsupported quantization type {value!r}: use one of {', '.join(TYPES)}")


def quantize_file(source: Path, info: GGUFInfo, kind: str, into: Path,
                  progress: ProgressFn | None) -> tuple[Path, GGUFInfo]:
    """Write ``source`` (read as ``info``) quantized to ``kind`` into a new file in the folder ``into``;
    return its path (the caller imports and removes it) and its header. InvalidRequest when the
    weights are already quantized; InvalidModelFile when llama.cpp cannot quantize the file."""
    if info.file_type not in QUANTIZABLE:
        raise InvalidRequest(f"cannot quantize a {info.file_type or 'mixed-type'} model to {kind}: quantizing needs "
                             f"unquantized weights ({', '.join(QUANTIZABLE)}); create from the original GGUF")
    status = f"quantizing {info.file_type} model to {kind}"
    report(progress, status)
    fd, out = temp_file(into)
    os.close(fd)
    proc = subprocess.Popen([sys.executable, "-m", "localrun.engine.quantize", str(source), str(out),
                             str(_FTYPE[kind])],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                step = json.loads(line)
                done, count = (step.get("tensor"), step.get("tensors")) if isinstance(step, dict) else (None, None)
                if isinstance(done, int) and isinstance(count, int) and count > 0:
                    # bytes, as every progress report counts (Ollama's too): the share of the source's tensors
                    report(progress, status, total=info.file_size, completed=info.file_size * done // count)
        failure = proc.stderr.read()
        if proc.wait() != 0:
            last = [x for x in failure.splitlines() if x.strip()][-1:] or [f"exit status {proc.returncode}"]
            raise InvalidModelFile(f"llama.cpp could not quantize this model to {kind}: {last[0]}")
        return out, read_gguf(out)  # what llama.cpp wrote is a model the store accepts
    except BaseException:
        proc.kill()
        proc.wait()
        out.unlink(missing_ok=True)
        raise
