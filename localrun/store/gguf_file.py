"""The one GGUF header reader: validates a file and reads its metadata without reading the weights.

:func:`read_gguf` walks the header (magic, version, key/value metadata, tensor infos) once, through
a read-only memory map, and refuses anything a hostile or broken file could use against us, each
time with an InvalidModelFile saying what is wrong:

- every length and count is checked against the bytes left in the file before it is used, and
  against a hard cap (``MAX_TENSORS``, ``MAX_KV``, ``MAX_ARRAY_LEN``, ``MAX_STRING``): nothing is
  allocated or looped over in proportion to a claimed size the file does not back;
- arrays nest at most ``MAX_NESTING`` deep (a 5,000-deep array of arrays is an error, not a
  RecursionError), value types must be known;
- every tensor's data must lie inside the file, and the file may not run on more than
  ``MAX_TRAILING`` bytes past the last tensor (a 1 TB sparse file behind a small header is
  refused here, before anyone hashes it); ``general.alignment`` is a power of two up to 1 MiB;
- the keys that size a model (layer and head counts, context length, embedding sizes, vocabulary)
  become a :class:`~localrun.store.geometry.ModelGeometry`, validated there for type and range
  (a float ``inf`` head count, ``block_count`` 2^31 or ``context_length`` -1 are errors here, so
  no planner ever sees them).

The store calls it on create and pull, so such files never enter the store; for stored files
:func:`read_gguf_cached` remembers the record (``/api/show``, and the fit check's
:func:`localrun.hardware.memory.read_geometry`).
The data types' block sizes come from :mod:`.ggml_types` (the ``gguf`` package, llama.cpp's own, only
for a type newer than that table). Its GGUFReader is not used because it decodes every vocabulary
entry into numpy objects (12 s for Gemma's 262k-token vocabulary on this machine) where this walk
only skips over them.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import InvalidModelFile
from ..jsontypes import JSONObject, JSONValue
from ..modelkind import ModelKind
from .geometry import ArrayLen, ModelGeometry, geometry_of
from .ggml_types import block_size, file_type_name
from .tokenizer_facts import read_facts


class GGUFValueType(IntEnum):
    """GGUF metadata value types (``gguf.GGUFValueType``, fixed by the file format). Kept here, as
    :mod:`.ggml_types` is, so the daemon reads headers without the gguf package and numpy behind it."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12

MAGIC = b"GGUF"
MAX_TENSORS = 1 << 20
MAX_KV = 1 << 20
MAX_DIMS = 8
MAX_NESTING = 4            # arrays of arrays of ...: llama.cpp's own files never nest
MAX_ARRAY_LEN = 1 << 24    # elements in one array (vocabularies hold up to a few hundred thousand)
MAX_STRING = 1 << 26       # bytes in one string (chat templates are kilobytes)
_U64 = struct.Struct("<Q")
MAX_KEY = 1 << 16          # bytes in one key name
MAX_ALIGNMENT = 1 << 20
MAX_TRAILING = 1 << 20     # bytes after the last tensor's data: writers pad to the alignment, no more
_SCALAR = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
_KEEP_ARRAY = 64  # string arrays longer than this are skipped, only their length is kept
_KEEP_NUMBERS = 1024  # numeric arrays up to this long are kept: per-layer values (head counts...)


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    """What the store and the fit check need to know about a GGUF file (validated)."""

    version: int
    architecture: str | None
    name: str | None
    file_type: str | None          # e.g. "Q4_K_M"
    parameter_count: int
    context_length: int | None
    chat_template: str | None
    tensor_count: int
    file_size: int
    geometry: ModelGeometry
    metadata: JSONObject = field(default_factory=dict)  # scalars and short arrays, JSON-safe

    @property
    def parameter_size(self) -> str:
        """Human form like Ollama's ``268.10M`` / ``1.24B``."""
        n = self.parameter_count
        for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if n >= scale:
                return f"{n / scale:.2f}{unit}"
        return str(n)

    def summary(self) -> JSONObject:
        """The config-blob fields (Ollama's names, plus ``base_model`` and, for an embedding model or a
        reranker, ``model_kind``) for this model."""
        kind = self.geometry.kind
        return {
            "base_model": self.geometry.base_model,
            **({"model_kind": str(kind)} if kind is not ModelKind.GENERATION else {}),
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

    def length(self, what: str, cap: int) -> int:
        """A length field: it may not claim more bytes than the file has left, nor exceed ``cap``."""
        n = int(self.unpack("<Q", what))
        self.need(min(n, self.size), what)
        if n > cap:
            raise InvalidModelFile(f"impossible length {n} in the {what} (at most {cap})")
        return n

    def string(self, what: str, cap: int = MAX_STRING) -> str:
        n = self.length(what, cap)
        self.need(n, what)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int, what: str) -> None:
        """Step over ``count`` strings, checked as :meth:`string` checks one. Each string's length says
        where the next begins, so this is a walk: one tight loop (a 152k-token vocabulary and its
        merges in ~0.1 s, where a call per string took ~0.5)."""
        buf, pos, size = self.buf, self.pos, self.size
        read = _U64.unpack_from
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                self.need(8, what)
            (n,) = read(buf, pos)
            pos += 8
            if n > size - pos or n > MAX_STRING:
                self.pos = pos - 8
                self.length(what, MAX_STRING)  # raises the message a single string's read would
            pos += n
        self.pos = pos


def _value(cur: _Cursor, vtype: int, key: str, depth: int = 0) -> JSONValue:
    what = f"value of {key!r}"
    if vtype in _SCALAR:
        scalar: int | float | bool = cur.unpack(_SCALAR[GGUFValueType(vtype)], what)  # a number struct read
        return scalar
    if vtype == GGUFValueType.STRING:
        return cur.string(what)
    if vtype != GGUFValueType.ARRAY:
        raise InvalidModelFile(f"unknown value type {vtype} for {key!r}")
    if depth >= MAX_NESTING:
        raise InvalidModelFile(f"{key!r} nests arrays deeper than {MAX_NESTING} levels")
    etype = cur.unpack("<I", what)
    count = cur.length(what, MAX_ARRAY_LEN)
    if etype in _SCALAR:
        size = struct.calcsize(_SCALAR[GGUFValueType(etype)])
        cur.need(count * size, what)
        if count <= _KEEP_NUMBERS:
            values = list(struct.unpack_from("<" + _SCALAR[GGUFValueType(etype)][1] * count, cur.buf, cur.pos))
            cur.pos += count * size
            return values
        cur.pos += count * size
        return ArrayLen(count)
    if etype == GGUFValueType.STRING:
        cur.need(count * 8, what)  # every element carries at least its 8-byte length
        if count <= _KEEP_ARRAY:
            return [cur.string(what) for _ in range(count)]
        cur.skip_strings(count, what)
        return ArrayLen(count)
    if etype == GGUFValueType.ARRAY:
        cur.need(count * 12, what)  # every element carries at least its type and length
        items = [_value(cur, GGUFValueType.ARRAY, key, depth + 1) for _ in range(count)]
        return items if count <= _KEEP_ARRAY else ArrayLen(count)
    raise InvalidModelFile(f"unknown array element type {etype} in {what}")


def _file_type_name(value: JSONValue) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return file_type_name(value)


def read_gguf(path: Path, label: str | None = None) -> GGUFInfo:
    """Validate ``path`` as a GGUF model and read its metadata; raises InvalidModelFile.

    Messages name the file as ``label`` when given (a blob's digest: an API client is not told
    where the store lives), else by its path.
    """
    path = Path(path)
    name, short = (label, label) if label else (str(path), path.name)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the `with f:` below, after the error is mapped
    except IsADirectoryError:
        raise InvalidModelFile(f"{name} is a directory, not a .gguf file") from None
    except OSError as exc:
        raise InvalidModelFile(f"cannot open {name}: {exc.strerror or exc}") from None
    with f:
        try:
            size = Path(path).stat().st_size
            if size < 24:
                raise InvalidModelFile(f"{name} is not a GGUF file: only {size} bytes")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:  # /sys and /proc files claim sizes they cannot map
            raise InvalidModelFile(f"{name} cannot be read as a model file: {exc}") from None
        with buf:
            try:
                return _parse(buf, size)
            except InvalidModelFile as exc:
                raise InvalidModelFile(f"{short} is not a valid GGUF model: {exc}") from None
            except (struct.error, ValueError, OverflowError, MemoryError, RecursionError, OSError) as exc:
                raise InvalidModelFile(f"{short} is not a valid GGUF model: {exc}") from None


def read_gguf_cached(path: Path) -> GGUFInfo:
    """:func:`read_gguf` of a file the store keeps, remembered while its size, modification time and
    inode stay the same (the last 64 files): the routes, the fit check and ``/api/show`` ask often,
    and walking a 152k-token vocabulary costs ~0.15 s of CPU a time. Raises InvalidModelFile."""
    try:
        st = Path(path).stat()
    except OSError as exc:
        raise InvalidModelFile(f"cannot read model file {path}: {exc.strerror}") from exc
    return _read_cached(str(path), st.st_size, st.st_mtime_ns, st.st_ino)


@lru_cache(maxsize=64)
def _read_cached(path: str, _size: int, _mtime_ns: int, _inode: int) -> GGUFInfo:
    return read_gguf(Path(path))


def _parse(buf: mmap.mmap, size: int) -> GGUFInfo:
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
    meta: JSONObject = {}
    tokens_at: int | None = None
    for _ in range(n_kv):
        key = cur.string("metadata key", MAX_KEY)
        vtype = cur.unpack("<I", f"type of {key!r}")
        if key == "tokenizer.ggml.tokens" and vtype == GGUFValueType.ARRAY:
            tokens_at = cur.pos  # the facts reader walks it again, now that _value checked its bounds
        meta[key] = _value(cur, vtype, key)
    tensors = [_tensor_info(cur, i) for i in range(n_tensors)]
    alignment = meta.get("general.alignment", 32)
    if (not isinstance(alignment, int) or isinstance(alignment, bool) or not 0 < alignment <= MAX_ALIGNMENT
            or alignment & (alignment - 1)):
        raise InvalidModelFile(f"invalid general.alignment {alignment!r} (a power of two up to {MAX_ALIGNMENT})")
    data_start = -(-cur.pos // alignment) * alignment
    data_end = data_start if tensors else cur.pos
    for name, ttype, n_el, offset in tensors:
        sizes = block_size(ttype)
        if sizes is None:
            raise InvalidModelFile(f"tensor {name!r} has an unknown data type {ttype}")
        block, type_size = sizes
        end = data_start + offset + n_el * type_size // block
        if end > size:
            raise InvalidModelFile(
                f"tensor {name!r} needs bytes up to {end} but the file has only {size} "
                "(the file is truncated or its tensor sizes are impossible)"
            )
        data_end = max(data_end, end)
    if size - data_end > MAX_TRAILING:
        raise InvalidModelFile(
            f"the file is {size} bytes but its header accounts for only {data_end} "
            "(its tensor sizes do not match its length: not a model llama.cpp wrote)"
        )
    geometry = geometry_of(meta, size, read_facts(buf, meta, tokens_at))
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    name_v = meta.get("general.name")
    return GGUFInfo(
        version=version,
        architecture=arch,
        name=name_v if isinstance(name_v, str) else None,
        file_type=_file_type_name(meta.get("general.file_type")),
        parameter_count=sum(t[2] for t in tensors),
        context_length=geometry.n_ctx_train if arch and f"{arch}.context_length" in meta else None,
        chat_template=geometry.chat_template,
        tensor_count=n_tensors,
        file_size=size,
        geometry=geometry,
        metadata={k: _json_safe(v) for k, v in meta.items() if not isinstance(v, ArrayLen)},
    )


def _tensor_info(cur: _Cursor, i: int) -> tuple[str, int, int, int]:
    """(name, type, number of elements, offset) of tensor ``i``."""
    name = cur.string(f"tensor info #{i}", MAX_KEY)
    n_dims = cur.unpack("<I", f"tensor {name!r}")
    if not 0 < n_dims <= MAX_DIMS:
        raise InvalidModelFile(f"tensor {name!r} has an impossible number of dimensions: {n_dims}")
    n_el = 1
    for _ in range(n_dims):
        n_el *= cur.unpack("<Q", f"tensor {name!r}")
    ttype = cur.unpack("<I", f"tensor {name!r}")
    offset = cur.unpack("<Q", f"tensor {name!r}")
    return name, ttype, n_el, offset


def _json_safe(value: JSONValue) -> JSONValue:
    """Non-finite floats (NaN, inf) are not JSON: /api/show shows them as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value
