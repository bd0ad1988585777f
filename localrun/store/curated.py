"""Curated Modelfiles: names like ``qwen2.5:0.5b`` that resolve to a known hf.co GGUF and template.

They live in ``modelfiles/<model>/<tag>.Modelfile``: in a source checkout at the repository root,
in an installed wheel as ``localrun/_modelfiles`` (pyproject force-includes it).

An untagged name means ``:latest``, as in Ollama; for a curated family without a ``latest``
Modelfile, ``latest`` means the family's default tag: its only tag, or the one named in
``modelfiles/<model>/latest.txt`` (``llama3.2`` is ``llama3.2:1b``, ``gemma3`` is ``gemma3:1b``).
"""

from __future__ import annotations

from pathlib import Path

from .names import DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG, ModelName

SUFFIX = ".Modelfile"


def modelfiles_dir() -> Path | None:
    """The curated Modelfiles directory, or None when neither location exists."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_modelfiles", package.parent / "modelfiles"):
        if candidate.is_dir():
            return candidate
    return None


LATEST_FILE = "latest.txt"


def _find(root: Path, name: ModelName) -> Path | None:
    exact = root / name.model / f"{name.tag}{SUFFIX}"
    if exact.is_file():
        return exact
    key = (name.model.casefold(), name.tag.casefold())
    for path in root.glob(f"*/*{SUFFIX}"):
        if (path.parent.name.casefold(), path.name[: -len(SUFFIX)].casefold()) == key:
            return path
    return None


def _default_tag(family: Path) -> str | None:
    """A family folder's default tag: the one ``latest.txt`` names, else its only tag."""
    declared = family / LATEST_FILE
    if declared.is_file():
        lines = [ln.strip() for ln in declared.read_text(encoding="utf-8").splitlines()]
        tags = [ln for ln in lines if ln and not ln.startswith("#")]
        return tags[0] if tags else None
    tags = [p.name[: -len(SUFFIX)] for p in family.glob(f"*{SUFFIX}")]
    return tags[0] if len(tags) == 1 else None


def _path_of(name: ModelName) -> Path | None:
    """The Modelfile a default-registry ``name`` means, following ``latest`` to the family's default tag."""
    root = modelfiles_dir()
    if root is None or name.host != DEFAULT_HOST or name.namespace != DEFAULT_NAMESPACE:
        return None
    found = _find(root, name)
    if found is not None or name.tag.casefold() != DEFAULT_TAG:
        return found
    family = next((d for d in root.iterdir() if d.is_dir() and d.name.casefold() == name.model.casefold()), None)
    tag = _default_tag(family) if family is not None else None
    return root / family.name / f"{tag}{SUFFIX}" if family is not None and tag is not None else None


def curated_name(name: ModelName) -> ModelName | None:
    """The curated model ``name`` means (``llama3.2`` -> ``llama3.2:1b``), spelled as curated, or None."""
    path = _path_of(name)
    if path is None or not path.is_file():
        return None
    return ModelName.parse(f"{path.parent.name}:{path.name[: -len(SUFFIX)]}")


def curated_path(name: ModelName) -> Path | None:
    """The curated Modelfile for ``name`` (case-insensitive; an untagged name means its default tag), or None."""
    path = _path_of(name)
    return path if path is not None and path.is_file() else None


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
