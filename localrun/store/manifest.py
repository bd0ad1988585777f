"""Manifests: the JSON that lists a model's layers, at ``manifests/<host>/<namespace>/<model>/<tag>``.

The format is Ollama's (an OCI-style image manifest), so an Ollama store can be adopted as is::

    {"schemaVersion": 2,
     "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
     "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": ..., "size": ...},
     "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:...", "size": ...}, ...]}

A model's ID is the sha256 of its manifest bytes (``localrun list`` shows the first 12 hex digits).
Manifests are written atomically (temp file + rename); callers that must see a consistent set of
manifests (create, remove + garbage collection) hold the store lock (see ``model_store``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidName, StoreError
from ..jsontypes import JSONObject
from .names import ModelName

log = logging.getLogger(__name__)

MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"
_PREFIX = "application/vnd.ollama.image."
MODEL = _PREFIX + "model"
ADAPTER = _PREFIX + "adapter"
PROJECTOR = _PREFIX + "projector"  # a vision model's mmproj GGUF (Ollama's name)
TEMPLATE = _PREFIX + "template"
SYSTEM = _PREFIX + "system"
PARAMS = _PREFIX + "params"
LICENSE = _PREFIX + "license"
MESSAGES = _PREFIX + "messages"


@dataclass(frozen=True, slots=True)
class Layer:
    media_type: str
    digest: str
    size: int

    def to_json(self) -> JSONObject:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}

    @classmethod
    def from_json(cls, data: object) -> Layer:
        if not isinstance(data, dict):
            raise StoreError("manifest layer is not an object")
        try:
            return cls(str(data["mediaType"]), str(data["digest"]), int(data["size"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"manifest layer is malformed: {exc}") from None


@dataclass(frozen=True, slots=True)
class Manifest:
    config: Layer
    layers: tuple[Layer, ...] = field(default_factory=tuple)

    def to_bytes(self) -> bytes:
        data = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": self.config.to_json(),
            "layers": [layer.to_json() for layer in self.layers],
        }
        return json.dumps(data, indent=None, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise StoreError(f"manifest is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or "config" not in data or not isinstance(data.get("layers"), list):
            raise StoreError("manifest lacks 'config' or 'layers'")
        return cls(Layer.from_json(data["config"]), tuple(Layer.from_json(x) for x in data["layers"]))

    def first(self, media_type: str) -> Layer | None:
        return next((x for x in self.layers if x.media_type == media_type), None)

    def all(self, media_type: str) -> list[Layer]:
        return [x for x in self.layers if x.media_type == media_type]

    @property
    def digests(self) -> set[str]:
        return {self.config.digest, *(x.digest for x in self.layers)}

    @property
    def total_size(self) -> int:
        """Bytes of the model on disk: config plus every distinct layer."""
        sizes = {self.config.digest: self.config.size}
        sizes.update({x.digest: x.size for x in self.layers})
        return sum(sizes.values())


@dataclass(frozen=True, slots=True)
class StoredManifest:
    name: ModelName
    manifest: Manifest
    digest: str          # sha256 of the manifest bytes: the model's ID
    modified: float      # mtime of the manifest file (seconds since the epoch)


class ManifestStore:
    """The ``manifests/`` tree of a store."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "manifests"

    def path(self, name: ModelName) -> Path:
        return self.dir.joinpath(*name.relpath.parts)

    def exists(self, name: ModelName) -> bool:
        return self.path(name).is_file()

    def read(self, name: ModelName) -> StoredManifest | None:
        """The manifest of ``name``, or None when there is none."""
        path = self.path(name)
        try:
            raw = path.read_bytes()
            mtime = path.stat().st_mtime
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        manifest = Manifest.from_bytes(raw)
        return StoredManifest(name, manifest, f"sha256:{hashlib.sha256(raw).hexdigest()}", mtime)

    def write(self, name: ModelName, manifest: Manifest) -> str:
        """Atomically write (or replace) the manifest of ``name``; returns its digest."""
        path = self.path(name)
        raw = manifest.to_bytes()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(Exception):
                os.unlink(tmp)
            raise StoreError(f"cannot write the manifest of {name}: {exc.strerror or exc}") from exc
        return f"sha256:{hashlib.sha256(raw).hexdigest()}"

    def delete(self, name: ModelName) -> bool:
        path = self.path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        # Drop now-empty model/namespace/host directories, never manifests/ itself.
        parent = path.parent
        while parent != self.dir and parent.is_relative_to(self.dir):
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent
        return True

    def names(self) -> Iterator[ModelName]:
        """Every stored model name; files whose path is not a valid name are skipped."""
        if not self.dir.is_dir():
            return
        for path in sorted(self.dir.glob("*/*/*/*")):
            if not path.is_file() or path.name.startswith(".tmp-"):
                continue
            host, namespace, model, tag = path.relative_to(self.dir).parts
            try:
                name = ModelName.parse(f"{host}/{namespace}/{model}:{tag}")
            except InvalidName:
                log.warning("skipping manifest with an invalid name: %s", path)
                continue
            if name.relpath.parts == (host, namespace, model, tag):
                yield name

    def all(self) -> Iterator[StoredManifest]:
        for name in self.names():
            try:
                stored = self.read(name)
            except StoreError as exc:
                log.warning("skipping unreadable manifest of %s: %s", name, exc)
                continue
            if stored is not None:
                yield stored
