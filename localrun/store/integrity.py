"""``localrun verify [--repair]``: hash every stored blob against its name, repair what can be.

Loading a model re-hashes its weights only when their size, inode or mtime changed (hashing
gigabytes at every load would make loads slow), so bit rot that keeps all three goes unseen until
:func:`check` hashes everything. :func:`repair` then makes sure a bad blob is never served again:

- the corrupt file is deleted (a model using it then fails with a clear "missing" error instead
  of generating from wrong bytes);
- weights that came from the hub (``hf.co/...`` models, curated names, the starter package) are
  fetched again and verified, which restores the model as it was;
- anything else (weights created from a local GGUF, small layers) is reported with what to do:
  ``localrun create`` again from the source, or upload the right bytes (``POST /api/blobs``), which
  replaces a stored blob once they verify.

It also removes temp files left by killed creates and pulls.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ..errors import CorruptBlob, LocalrunError, ModelNotFound
from . import manifest as mt
from .model_store import ModelStore
from .names import ModelName
from .progress import ProgressFn, report


@dataclass(frozen=True, slots=True)
class BlobCheck:
    """One stored blob: the models using it, what is wrong (None: sound), and what was done."""

    digest: str
    media_type: str
    models: tuple[str, ...]
    problem: str | None = None
    repaired: bool = False
    hint: str | None = None

    @property
    def sound(self) -> bool:
        return self.problem is None or self.repaired


def check(store: ModelStore, names: Iterable[str] | None = None, progress: ProgressFn | None = None) -> list[BlobCheck]:
    """Hash every blob the named models (default: all) use; one BlobCheck per blob."""
    wanted = {str(ModelName.parse(n)) for n in names} if names else None
    users: dict[str, list[str]] = {}
    kinds: dict[str, str] = {}
    for stored in store.manifests.all():
        if wanted is not None and str(stored.name) not in wanted:
            continue
        for layer in (stored.manifest.config, *stored.manifest.layers):
            users.setdefault(layer.digest, []).append(str(stored.name))
            kinds[layer.digest] = layer.media_type
    if wanted:
        missing = wanted - {m for ms in users.values() for m in ms}
        if missing:
            raise ModelNotFound(f"model '{min(missing)}' not found")
    out = []
    for digest in sorted(users):
        status = f"verifying {digest[7:19]}"
        report(progress, status, digest=digest)
        problem = None
        try:
            store.blobs.verify(digest, functools.partial(_hashed, progress, status, digest))
        except CorruptBlob as exc:
            problem = exc.message
        out.append(BlobCheck(digest, kinds[digest], tuple(sorted(set(users[digest]))), problem))
    return out


def _hashed(progress: ProgressFn | None, status: str, digest: str, done: int) -> None:
    report(progress, status, digest=digest, completed=done)


def repair(store: ModelStore, checks: list[BlobCheck], progress: ProgressFn | None = None) -> list[BlobCheck]:
    """Delete every bad blob and fetch again those that came from the hub; the checks, updated."""
    store.remove_orphans()
    out = []
    for item in checks:
        if item.problem is None:
            out.append(item)
            continue
        store.blobs.remove(item.digest)  # never served again, whatever happens next
        why = None
        if item.media_type == mt.MODEL:
            try:
                if _refetch(store, item, progress):
                    store.blobs.verify(item.digest)
                    out.append(replace(item, repaired=True, hint="fetched again and verified"))
                    continue
            except LocalrunError as exc:
                why = f"fetching it again failed ({exc.message}); "
        models = ", ".join(item.models)
        out.append(replace(item, hint=f"{why or ''}removed; create {models} again from its source "
                                      "(`localrun create`), or upload the right bytes (POST /api/blobs)"))
    return out


def _refetch(store: ModelStore, item: BlobCheck, progress: ProgressFn | None) -> bool:
    from .pull import refetch_weights

    return any(refetch_weights(store, model, item.digest, progress) for model in item.models)
