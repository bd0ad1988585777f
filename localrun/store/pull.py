"""``localrun pull``: bring a model into the store.

Resolution order for a name that is not in the store yet:

1. a packaged model (the starter ``qwen2.5-coder:0.5b``, ``gemma3:270m``; for Gemma also its hf.co
   source name): imported offline from its PyPI packages when they are installed;
2. a curated name (``qwen2.5:0.5b``): its Modelfile from ``modelfiles/`` is created, its
   ``FROM hf.co/...`` downloaded; an untagged name means the family's default tag
   (``llama3.2`` is ``llama3.2:1b``, stored under that name);
3. ``hf.co/{user}/{repo}[:{quant}]``: the matching GGUF is downloaded (see :mod:`.hf`); the model
   gets no TEMPLATE layer, so the engine uses the GGUF's own ``tokenizer.chat_template``.

A model already in the store is not downloaded again.
"""

from __future__ import annotations

import logging

from ..errors import LocalrunError, ModelNotFound, PullError
from . import manifest as mt
from .create import Base, FromHook
from .curated import curated_name, curated_names, curated_path
from .gguf_file import read_gguf
from .manifest import Layer
from .model_store import ModelStore
from .modelfile import Modelfile
from .names import ModelName, near_names
from .progress import ProgressFn, report
from .records import ModelEntry, ResolvedModel
from .starter import ensure_packaged, import_blob, packaged_model, packaged_source

log = logging.getLogger(__name__)


def _entry(store: ModelStore, name: ModelName) -> ModelEntry | None:
    stored = store.find(name)
    if stored is None:
        return None
    return ModelEntry(str(stored.name), stored.digest, stored.manifest.total_size, stored.modified)


def fetch_hf(store: ModelStore, name: ModelName, progress: ProgressFn | None = None) -> Base:
    """Store the GGUF an hf.co name points to (offline when a package holds that file); no manifest."""
    packaged = packaged_source(name)
    if packaged is not None and packaged.locate() is not None:
        return import_blob(store, packaged, progress)
    from . import (  # httpx and the hub client load only when something is downloaded (start-up)
        hf,
        hfdownload,
    )

    report(progress, "pulling manifest")
    files = hf.list_ggufs(name.hf_repo)
    file = hf.pick(files, name.quant, name.hf_repo)
    projector = hf.pick_projector(files, file)
    layers: list[Layer] = []
    added: set[str] = set()
    try:
        for hub_file, media_type in ((file, mt.MODEL), (projector, mt.PROJECTOR)):
            if hub_file is None:
                continue
            existed = store.blobs.has(f"sha256:{hub_file.sha256}")
            digest = hfdownload.download(store.blobs, hub_file, progress)
            added |= set() if existed else {digest}
            info = read_gguf(store.blobs.path(digest))
            if media_type == mt.MODEL:
                summary = info.summary()
            layers.append(Layer(media_type, digest, info.file_size))
    except Exception:
        if added:
            store.collect_garbage(added)
        raise
    return Base(layers, summary, added)


def hub_hook(store: ModelStore) -> FromHook:
    """A create() FROM hook: downloads hf.co names and pulls missing curated names."""

    def hook(value: str, progress: ProgressFn | None) -> Base | None:
        try:
            name = ModelName.parse(value)
        except Exception:
            return None
        if store.find(name) is not None:
            return None  # use the stored model as the base
        if name.is_hf:
            return fetch_hf(store, name, progress)
        if curated_path(name) is not None:
            pull(store, value, progress)
        return None

    return hook


def pull(store: ModelStore, name: str, progress: ProgressFn | None = None) -> ModelEntry:
    """Make ``name`` present in the store; returns its entry. Raises ModelNotFound, PullError, ..."""
    parsed = ModelName.parse(name)
    existing = _entry(store, parsed)
    if existing is not None:
        report(progress, "already up to date")
        report(progress, "success")
        return existing
    meant = curated_name(parsed)
    packaged = packaged_model(meant or parsed)
    if packaged is not None and packaged.locate() is not None:
        if meant is not None and meant.tag.casefold() != parsed.tag.casefold():
            report(progress, f"{name} means {meant}")
        return ensure_packaged(store, packaged, progress)
    path = curated_path(parsed)
    if meant is not None and path is not None:
        if meant.tag.casefold() != parsed.tag.casefold():  # an untagged name: the family's default tag
            report(progress, f"{name} means {meant}")
            parsed = meant
        entry = store.create(str(parsed), path.read_text(encoding="utf-8"), base_dir=path.parent,
                             progress=progress, from_hook=hub_hook(store))
        return entry
    if parsed.is_hf:
        return store.create(str(parsed), Modelfile(from_=str(parsed)), progress=progress, from_hook=hub_hook(store))
    near = near_names(name, store.known_names())
    if near:
        raise ModelNotFound(f"model '{parsed}' not found; did you mean {' or '.join(repr(n) for n in near)}?")
    known = ", ".join(str(n) for n in curated_names())
    raise ModelNotFound(
        f"model '{parsed}' not found: not in the store, not a curated model ({known or 'none installed'}), "
        "and not an hf.co/{user}/{repo}[:{quant}] name"
    )


def refetch_weights(store: ModelStore, name: str, digest: str, progress: ProgressFn | None = None) -> bool:
    """Fetch the weights ``digest`` of model ``name`` again from where they came (repairing a bad blob).

    False when they did not come from the hub (a model created from a local file); PullError when
    the hub's file is no longer those bytes.
    """
    source = ModelName.parse(name)
    path = curated_path(source)
    if path is not None:
        from .modelfile import parse as parse_modelfile

        try:
            source = ModelName.parse(parse_modelfile(path.read_text(encoding="utf-8")).from_)
        except LocalrunError:
            return False
    if not source.is_hf:
        return False
    base = fetch_hf(store, source, progress)
    got = next((x.digest for x in base.layers if x.media_type == mt.MODEL), None)
    if got != digest:
        store.collect_garbage(base.added)
        raise PullError(f"the hub's file for {source} is no longer the stored one (now {got}); pull it again")
    return True


def ensure(store: ModelStore, name: str, progress: ProgressFn | None = None) -> ResolvedModel:
    """Resolve ``name``, pulling it first when it is missing (what `run` wants)."""
    parsed = ModelName.parse(name)
    if store.find(parsed, fetch_packaged=True) is None:
        pull(store, name, progress)
    return store.resolve(name)
