"""Model operations the chat performs through the backend: load (pulling when missing), /save, and
what the daemon says about a loaded model (its context).

Headless async functions, so the screens stay thin and tests can call them with a fake backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .. import config
from ..errors import InvalidRequest, LocalrunError, ModelNotFound, NotFound
from ..jsontypes import JSONObject
from .backend import DaemonApi

ProgressFn = Callable[[str, float | None, float | None], object]


async def pull(backend: DaemonApi, model: str, on_progress: ProgressFn) -> None:
    """Download ``model``, calling ``on_progress(status, completed, total)`` for each chunk."""
    async for chunk in backend.pull(model):
        total = chunk.get("total")
        completed = chunk.get("completed")
        on_progress(str(chunk.get("status") or ""),
                    float(completed) if isinstance(completed, (int, float)) else None,
                    float(total) if isinstance(total, (int, float)) else None)


async def ensure_loaded(backend: DaemonApi, model: str, on_progress: ProgressFn,
                        keep_alive: str | None = None) -> bool:
    """Load ``model``, pulling it first when the store does not have it; True when it pulled."""
    try:
        await backend.load(model, keep_alive)
        return False
    except (ModelNotFound, NotFound):
        pass
    await pull(backend, model, on_progress)
    await backend.load(model, keep_alive)
    return True


async def create(backend: DaemonApi, name: str, modelfile: str) -> str:
    """Create model ``name`` from Modelfile text; returns the daemon's last status line."""
    if not name.strip():
        raise InvalidRequest("a model name is needed")
    last = ""
    async for chunk in backend.create(name, modelfile):
        last = str(chunk.get("status") or last)
    return last or "success"


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the chat shows about a model: whether it is a base model, and its real defaults."""

    base_model: bool = False
    defaults: JSONObject = field(default_factory=dict)  # what a request without options gets
    vision: bool = False  # capabilities list "vision": the model takes images
    thinking: bool = False  # capabilities list "thinking": /set think reaches it


async def model_facts(backend: DaemonApi, model: str) -> ModelFacts:
    """The model's facts from the daemon's /api/show (``details.base_model``, ``defaults``)."""
    info = await backend.show(model)
    details, defaults = info.get("details"), info.get("defaults")
    base = isinstance(details, dict) and bool(details.get("base_model"))
    capabilities = info.get("capabilities")
    listed = capabilities if isinstance(capabilities, list) else []
    return ModelFacts(base, dict(defaults) if isinstance(defaults, dict) else {}, "vision" in listed,
                      "thinking" in listed)


def base_model_notice(model: str) -> str:
    """What a user chatting with a base model is told, once."""
    return (f"{model} is a base model: it continues text, it does not answer questions or follow a system "
            f"prompt. To chat, use the starter: localrun run {config.STARTER_MODEL}")


def full_name(name: str) -> str:
    """``tiny`` -> ``tiny:latest`` (the tag Ollama adds), lower-cased: names that mean the same model."""
    return (name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest").lower()


async def context_length(backend: DaemonApi, model: str) -> int | None:
    """The context the daemon loaded ``model`` with (``/api/ps``), None when it cannot say."""
    try:
        rows = await backend.ps()
    except LocalrunError:
        return None
    for row in rows:
        length = row.get("context_length")
        if full_name(str(row.get("name") or "")) == full_name(model) and isinstance(length, int):
            return length
    return None
