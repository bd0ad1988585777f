"""Validate a GGUF file and read the metadata the store shows, without reading the weights.

:func:`read_gguf` walks the header (magic, version, key/value metadata, tensor infos) through a
read-only memory map and checks that every tensor's data lies inside the file, so truncated files
and impossible tensor sizes are caught in milliseconds. Any problem is an InvalidModelFile saying
what is wrong. The ``gguf`` package (llama.cpp's own) supplies the type tables; its GGUFReader is
not used here because it decodes every vocabulary entry into numpy objects (12 s for Gemma's
262k-token vocabulary on this machine) where this walk only skips over them.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, LlamaFileType

from ..errors import InvalidModelFile

MAGIC = b"GGUF"
MAX_TENSORS = 1 << 20
MAX_KV = 1 << 20
MAX_DIMS = 8
_SCALAR = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
_KEEP_ARRAY = 64  # arrays longer than this are skipped, only their length is kept


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    """What the store needs to know about a GGUF file."""

    version: int
    architecture: str | None
    name: str | None
    file_type: str | None          # e.g. "Q4_K_M"
    parameter_count: int
    context_length: int | None
    chat_template: str | None
    tensor_count: int
    file_size: int
    metadata: dict[str, Any] = field(default_factory=dict)  # scalars and short arrays

    @property
    def parameter_size(self) -> str:
        """Human form like Ollama's ``268.10M`` / ``1.24B``."""
        n = self.parameter_count
        for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if n >= scale:
                return f"{n / scale:.2f}{unit}"
        return str(n)

    @property
    def base_model(self) -> bool:
        """See :func:`is_base_model`."""
        return is_base_model(self.chat_template, self.metadata.get("general.finetune"))

    def summary(self) -> dict[str, Any]:
        """The config-blob fields (Ollama's names, plus ``base_model``) for this model."""
        return {
            "base_model": self.base_model,
            "model_format": "gguf",
            "model_family": self.architecture,
            "model_families": [self.architecture] if self.architecture else [],
            "model_type": self.parameter_size,
            "file_type": self.file_type,
            "parameter_count": self.parameter_count,
            "context_length": self.context_length,
        }


class _Cursor:
    def __init__(self, buf: mmap.mmap, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise InvalidModelFile(f"the file is truncated: it ends inside the {what} (at byte {self.pos})")

    def unpack(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def string(self, what: str) -> str:
        n = self.unpack("<Q", what)
        self.need(n, what)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_string(self, what: str) -> None:
        n = self.unpack("<Q", what)
        self.need(n, what)
        self.pos += n


def _value(cur: _Cursor, vtype: int, key: str) -> Any:
    what = f"value of {key!r}"
    if vtype in _SCALAR:
        return cur.unpack(_SCALAR[GGUFValueType(vtype)], what)
    if vtype == GGUFValueType.STRING:
        return cur.string(what)
    if vtype == GGUFValueType.ARRAY:
        etype = cur.unpack("<I", what)
        count = cur.unpack("<Q", what)
        if etype in _SCALAR:
            size = struct.calcsize(_SCALAR[GGUFValueType(etype)])
            cur.need(count * size, what)
            if count <= _KEEP_ARRAY:
                fmt = "<" + _SCALAR[GGUFValueType(etype)][1] * count
                values = list(struct.unpack_from(fmt, cur.buf, cur.pos))
                cur.pos += count * size
                return values
            cur.pos += count * size
            return ArrayLen(count)
        if etype == GGUFValueType.STRING:
            if count > cur.size:
                raise InvalidModelFile(f"impossible array length {count} in {what}")
            if count <= _KEEP_ARRAY:
                return [cur.string(what) for _ in range(count)]
            for _ in range(count):
                cur.skip_string(what)
            return ArrayLen(count)
        if etype == GGUFValueType.ARRAY:
            if count > cur.size:
                raise InvalidModelFile(f"impossible array length {count} in {what}")
            items = [_value(cur, GGUFValueType.ARRAY, key) for _ in range(count)]
            return items if count <= _KEEP_ARRAY else ArrayLen(count)
        raise InvalidModelFile(f"unknown array element type {etype} in {what}")
    raise InvalidModelFile(f"unknown value type {vtype} for {key!r}")


_CHAT_FINETUNES = ("instruct", "chat", "it", "sft", "dpo", "rlhf", "assistant", "thinking", "reasoning")


def is_base_model(chat_template: object, finetune: object) -> bool:
    """A base (completion-only) model: no chat template, and ``general.finetune`` names no chat tuning.

    Such a model continues text; it does not answer questions or follow a system prompt.
    """
    if isinstance(chat_template, str) and chat_template.strip():
        return False
    words = str(finetune or "").casefold().replace("_", "-").split("-")
    return not any(w in _CHAT_FINETUNES for w in words)


class ArrayLen(int):
    """Stands for a long array that was skipped; its value is the length."""


def _file_type_name(value: Any) -> str | None:
    if not isinstance(value, int):
        return None
    try:
        return LlamaFileType(value).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return str(value)


def read_gguf(path: Path) -> GGUFInfo:
    """Validate ``path`` as a GGUF model and read its metadata; raises InvalidModelFile."""
    try:
        f = open(path, "rb")
    except IsADirectoryError:
        raise InvalidModelFile(f"{path} is a directory, not a .gguf file") from None
    except OSError as exc:
        raise InvalidModelFile(f"cannot open {path}: {exc.strerror or exc}") from None
    with f:
        size = Path(path).stat().st_size
        if size < 24:
            raise InvalidModelFile(f"{path} is not a GGUF file: only {size} bytes")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                return _parse(buf, size, path)
            except InvalidModelFile as exc:
                raise InvalidModelFile(f"{path.name} is not a valid GGUF model: {exc}") from None
            except (struct.error, ValueError, OverflowError, MemoryError) as exc:
                raise InvalidModelFile(f"{path.name} is not a valid GGUF model: {exc}") from None


def _parse(buf: mmap.mmap, size: int, path: Path) -> GGUFInfo:
    if buf[:4] != MAGIC:
        raise InvalidModelFile("it does not start with the GGUF magic bytes (is it a GGUF file?)")
    cur = _Cursor(buf, size)
    cur.pos = 4
    version = cur.unpack("<I", "header")
    if version not in (2, 3):
        raise InvalidModelFile(f"unsupported GGUF version {version} (expected 2 or 3)")
    n_tensors = cur.unpack("<Q", "header")
    n_kv = cur.unpack("<Q", "header")
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
        raise InvalidModelFile(f"impossible header counts: {n_tensors} tensors, {n_kv} metadata keys")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key")
        vtype = cur.unpack("<I", f"type of {key!r}")
        meta[key] = _value(cur, vtype, key)
    tensors: list[tuple[str, int, int, int]] = []  # name, type, n_elements, offset
    for i in range(n_tensors):
        name = cur.string(f"tensor info #{i}")
        n_dims = cur.unpack("<I", f"tensor {name!r}")
        if not 0 < n_dims <= MAX_DIMS:
            raise InvalidModelFile(f"tensor {name!r} has an impossible number of dimensions: {n_dims}")
        dims = [cur.unpack("<Q", f"tensor {name!r}") for _ in range(n_dims)]
        ttype = cur.unpack("<I", f"tensor {name!r}")
        offset = cur.unpack("<Q", f"tensor {name!r}")
        n_el = 1
        for d in dims:
            n_el *= d
        tensors.append((name, ttype, n_el, offset))
    alignment = meta.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise InvalidModelFile(f"invalid general.alignment {alignment!r}")
    data_start = -(-cur.pos // alignment) * alignment
    for name, ttype, n_el, offset in tensors:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        except (ValueError, KeyError):
            raise InvalidModelFile(f"tensor {name!r} has an unknown data type {ttype}") from None
        nbytes = n_el * type_size // block
        end = data_start + offset + nbytes
        if end > size:
            raise InvalidModelFile(
                f"tensor {name!r} needs bytes up to {end} but the file has only {size} "
                "(the file is truncated or its tensor sizes are impossible)"
            )
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    ctx = meta.get(f"{arch}.context_length") if arch else None
    template = meta.get("tokenizer.chat_template")
    name_v = meta.get("general.name")
    return GGUFInfo(
        version=version,
        architecture=arch,
        name=name_v if isinstance(name_v, str) else None,
        file_type=_file_type_name(meta.get("general.file_type")),
        parameter_count=sum(t[2] for t in tensors),
        context_length=int(ctx) if isinstance(ctx, int) else None,
        chat_template=template if isinstance(template, str) else None,
        tensor_count=n_tensors,
        file_size=size,
        metadata={k: v for k, v in meta.items() if not isinstance(v, ArrayLen)},
    )
