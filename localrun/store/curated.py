"""Curated Modelfiles: names like ``qwen2.5:0.5b`` that resolve to a known hf.co GGUF and template.

They live in ``modelfiles/<model>/<tag>.Modelfile``: in a source checkout at the repository root,
in an installed wheel as ``localrun/_modelfiles`` (pyproject force-includes it).
"""

from __future__ import annotations

from pathlib import Path

from .names import DEFAULT_HOST, DEFAULT_NAMESPACE, ModelName

SUFFIX = ".Modelfile"


def modelfiles_dir() -> Path | None:
    """The curated Modelfiles directory, or None when neither location exists."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_modelfiles", package.parent / "modelfiles"):
        if candidate.is_dir():
            return candidate
    return None


def curated_path(name: ModelName) -> Path | None:
    """The curated Modelfile for ``name`` (case-insensitive), or None."""
    root = modelfiles_dir()
    if root is None or name.host != DEFAULT_HOST or name.namespace != DEFAULT_NAMESPACE:
        return None
    exact = root / name.model / f"{name.tag}{SUFFIX}"
    if exact.is_file():
        return exact
    key = (name.model.casefold(), name.tag.casefold())
    for path in root.glob(f"*/*{SUFFIX}"):
        if (path.parent.name.casefold(), path.name[: -len(SUFFIX)].casefold()) == key:
            return path
    return None


def curated_modelfile(name: ModelName) -> str | None:
    path = curated_path(name)
    return path.read_text(encoding="utf-8") if path else None


def curated_names() -> list[ModelName]:
    root = modelfiles_dir()
    if root is None:
        return []
    names = []
    for path in sorted(root.glob(f"*/*{SUFFIX}")):
        try:
            names.append(ModelName.parse(f"{path.parent.name}:{path.name[: -len(SUFFIX)]}"))
        except Exception:  # a stray file with an odd name is not a curated model
            continue
    return names
