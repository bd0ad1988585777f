"""Helpers shared by the daemon tests (importable by name: pyproject's pytest `pythonpath` lists this folder)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from localrun.errors import ModelNotFound
from localrun.store.records import ModelEntry


@dataclasses.dataclass
class Resolved:
    name: str
    model_path: str
    adapter_path: str | None = None
    projector_path: str | None = None
    template: str | None = None
    system: str | None = None
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    messages: list[Any] = dataclasses.field(default_factory=list)
    license: str | None = None
    digest: str = "sha256:0123456789abcdef0123"


class DictStore:
    """A minimal stand-in for the model store: names -> GGUF paths (for runtime tests)."""

    def __init__(self, models: dict[str, Path], **fields: Any) -> None:
        self.models = {self._full(k): v for k, v in models.items()}
        self.fields = fields

    @staticmethod
    def _full(name: str) -> str:
        return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"

    def resolve(self, name: str) -> Resolved:
        full = self._full(name)
        if full not in self.models:
            raise ModelNotFound(f"model {name!r} not found, try pulling it first")
        return Resolved(full, str(self.models[full]), **self.fields.get(full, {}))

    def resolve_unchanged(self, name: str) -> None:
        """Never known: every request resolves (the real store's fast path is tested with the real store)."""
        return None

    def list(self) -> list[ModelEntry]:
        """Rows like the real store's: modified is the GGUF's mtime, size its length."""
        rows = []
        for name, path in self.models.items():
            stat = Path(path).stat()
            rows.append(ModelEntry(name, self.resolve(name).digest, stat.st_size, stat.st_mtime))
        return rows
