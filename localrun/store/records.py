"""The typed results the store hands out: list entries, show details, resolved models."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..jsontypes import JSONObject
from ..modelkind import ModelKind
from .modelfile import Message


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One row of ``localrun list``."""

    name: str          # display form, e.g. "gemma3:270m"
    digest: str        # sha256 of the manifest: the model's ID
    size: int          # bytes on disk (all layers)
    modified: float    # seconds since the epoch
    base_model: bool = False  # completion only (no chat template, no chat tuning); from the config blob
    vision: bool = False      # it has a projector layer: it takes images
    kind: ModelKind = ModelKind.GENERATION  # an embedding model or a reranker; from the config blob

    @property
    def id(self) -> str:
        """The short ID ``localrun list`` shows: the first 12 hex digits of the manifest digest."""
        return self.digest.removeprefix("sha256:")[:12]


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """Everything the engine/daemon needs to load and prompt a model.

    ``template`` is the Modelfile TEMPLATE (Ollama Go-template syntax) or None, in which case the
    engine uses the GGUF's own ``tokenizer.chat_template`` (Jinja). ``parameters`` are typed
    Modelfile PARAMETERs (``stop`` is a list). ``metadata`` is the config blob: model_family,
    model_type (parameter size), file_type (quantization), context_length, ...
    """

    name: str
    digest: str
    model_path: Path
    adapter_path: Path | None
    template: str | None
    system: str | None
    parameters: JSONObject
    messages: list[Message]
    license: str | None
    metadata: JSONObject = field(default_factory=dict)
    projector_path: Path | None = None  # a vision model's mmproj: the model takes images


@dataclass(frozen=True, slots=True)
class ModelDetails:
    """What ``localrun show`` prints."""

    name: str
    digest: str
    size: int
    modified: float
    modelfile: str                 # a Modelfile that re-creates this model
    parameters: JSONObject
    template: str | None           # the Modelfile TEMPLATE, else the GGUF's chat template
    template_source: str           # "modelfile", "gguf" or "none"
    system: str | None
    licenses: list[str]
    messages: list[Message]
    adapter_path: Path | None
    model_path: Path
    details: JSONObject            # family, parameter_size, quantization_level, format
    model_info: JSONObject         # GGUF metadata (scalars and short arrays)
    projector_path: Path | None = None  # a vision model's mmproj
