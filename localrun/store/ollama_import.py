"""``localrun import-ollama``: adopt the models of an existing Ollama store.

Ollama keeps the same layout (``manifests/<host>/<namespace>/<model>/<tag>`` and
``blobs/sha256-<hex>``) and layer types, so adopting a model means linking its blobs into our
store (hard links; a copy only when the stores are on different filesystems) and writing its
manifest under the same name: ``registry.ollama.ai/library/gemma3:270m`` becomes ``gemma3:270m``,
``hf.co/...`` names stay as they are. Templates, system prompts, parameters, messages and
licenses travel as the layers they already are. Nothing is downloaded. Blobs are not re-hashed
here (that would read every byte); the store hashes each one the first time it is used.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidName, NotFound, StoreError
from .blobs import temp_file
from .manifest import Manifest
from .model_store import ModelStore
from .names import ModelName
from .progress import ProgressFn, report

log = logging.getLogger(__name__)


class ImportStatus(enum.Enum):
    IMPORTED = "imported"
    UNCHANGED = "already present"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class ImportResult:
    name: str
    status: ImportStatus
    detail: str = ""


def ollama_models_dir() -> Path:
    """``OLLAMA_MODELS`` when set, else ``~/.ollama/models``."""
    raw = os.environ.get("OLLAMA_MODELS", "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".ollama" / "models"


def _link(src: Path, dst_dir: Path, dst: Path) -> str:
    fd, tmp = temp_file(dst_dir)
    os.close(fd)
    try:
        tmp.unlink()
        try:
            os.link(src, tmp)
            how = "hard link"
        except OSError:
            shutil.copyfile(src, tmp)
            how = "copy"
        if dst.exists():
            return "already present"
        os.replace(tmp, dst)
        return how
    finally:
        tmp.unlink(missing_ok=True)


def _scan(source: Path) -> list[tuple[Path, str]]:
    """(manifest path, name text) for every manifest under ``source/manifests``."""
    root = source / "manifests"
    found = []
    for path in sorted(root.glob("*/*/*/*")):
        if path.is_file():
            host, namespace, model, tag = path.relative_to(root).parts
            found.append((path, f"{host}/{namespace}/{model}:{tag}"))
    return found


def import_ollama(
    store: ModelStore,
    source: Path | None = None,
    *,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> list[ImportResult]:
    """Adopt every model of the Ollama store at ``source``; one result per model found.

    A name that already exists here with a different manifest is skipped unless ``force``.
    Raises NotFound when ``source`` holds no Ollama store.
    """
    src = source or ollama_models_dir()
    if not (src / "manifests").is_dir():
        raise NotFound(f"no Ollama models found at {src} (set OLLAMA_MODELS or pass --from DIR)")
    store.blobs.ensure_dirs()
    results: list[ImportResult] = []
    for path, text in _scan(src):
        try:
            name = ModelName.parse(text)
            manifest = Manifest.from_bytes(path.read_bytes())
        except (InvalidName, StoreError, OSError) as exc:
            results.append(ImportResult(text, ImportStatus.SKIPPED, str(exc)))
            continue
        results.append(_adopt(store, src, name, manifest, force, progress))
    return results


def _adopt(store: ModelStore, src: Path, name: ModelName, manifest: Manifest, force: bool,
           progress: ProgressFn | None) -> ImportResult:
    existing = store.manifests.read(name)
    if existing is not None:
        if existing.manifest == manifest:
            return ImportResult(str(name), ImportStatus.UNCHANGED)
        if not force:
            return ImportResult(str(name), ImportStatus.SKIPPED, "a different model has this name here (use --force)")
    missing = [d for d in sorted(manifest.digests) if not (src / "blobs" / d.replace(":", "-")).is_file()]
    if missing:
        return ImportResult(str(name), ImportStatus.SKIPPED, f"blob {missing[0]} is missing from the Ollama store")
    report(progress, f"importing {name}")
    methods: set[str] = set()
    linked: set[str] = set()
    try:
        for digest in sorted(manifest.digests):
            if store.blobs.has(digest):
                continue
            methods.add(_link(src / "blobs" / digest.replace(":", "-"), store.blobs.dir, store.blobs.path(digest)))
            linked.add(digest)
        store.commit_manifest(name, manifest)
    except (OSError, StoreError) as exc:
        store.collect_garbage(linked)  # leave the store as it was
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return ImportResult(str(name), ImportStatus.SKIPPED, f"cannot adopt it: {detail}")
    how = " and ".join(sorted(methods - {"already present"})) or "shared blobs"
    log.info("adopted Ollama model %s by %s", name, how)
    return ImportResult(str(name), ImportStatus.IMPORTED, how)
