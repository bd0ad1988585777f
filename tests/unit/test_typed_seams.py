"""No ``Any`` at a seam: what one package imports from another is fully typed.

A *package* is ``localrun/<pkg>/`` (engine, server, tui, ...); a top-level module such as
``localrun/client.py`` or ``localrun/config.py`` is a package of its own. A *seam* is a name that a
module of package Q imports from a module of another package P: ``from localrun.P.mod import name``
(relative or absolute, followed through re-exports such as a package ``__init__``), or
``mod.name`` after ``from localrun.P import mod`` / ``import localrun.P.mod as mod``.

For each seam this test reads P's definition with ``ast`` (nothing is imported) and fails listing every
annotation that mentions ``typing.Any``:

- a function: its parameters and return;
- a class: its class-level annotations (dataclass, TypedDict, Protocol fields), ``self.x: T`` in its
  methods, and the parameters and returns of its methods, except ``_private`` ones (dunders count);
- a module-level variable or type alias: its annotation, or the aliased type.

Values a callee checks itself are ``object``; JSON is ``localrun.jsontypes``; anything else has a real
type. ``Any`` inside one package (a private helper, a JSON body that never leaves its package) is not a
seam and is not looked at. The seams still typed ``Any`` are listed in :data:`KNOWN`, which may only shrink.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import localrun

ROOT = Path(localrun.__file__).parent


def _package(module: str) -> str:
    """``localrun.server.http`` -> ``server``; ``localrun.client`` -> ``client``; ``localrun`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _path(module: str) -> Path | None:
    """The source file of a ``localrun`` module, or None for a name that is not one."""
    rel = Path(*module.split(".")[1:])
    for candidate in (ROOT / rel / "__init__.py", (ROOT / rel).with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("localrun", *(parts[:-1] if parts[-1] == "__init__" else parts)))


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``from ... import`` reads from ``path``."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


@cache
def _aliases(path: Path) -> dict[str, ast.expr]:
    """Module-level ``Name = <type>`` assignments of ``path`` (so an alias cannot hide ``Any``)."""
    out: dict[str, ast.expr] = {}
    for node in _tree(path).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def _mentions_any(node: ast.AST | None, path: Path, seen: frozenset[str] = frozenset()) -> bool:
    """Whether an annotation names ``Any``: directly, quoted, or through an alias of the same module."""
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return True
        if (isinstance(sub, ast.Name) and sub.id in _aliases(path) and sub.id not in seen
                and _mentions_any(_aliases(path)[sub.id], path, seen | {sub.id})):
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                if _mentions_any(ast.parse(sub.value, mode="eval"), path, seen):
                    return True
            except SyntaxError:
                continue
    return False


def _function_findings(fn: ast.FunctionDef | ast.AsyncFunctionDef, where: str, path: Path) -> list[str]:
    args = fn.args
    found = [f"{where}({a.arg})" for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
             if _mentions_any(a.annotation, path)]
    found += [f"{where}(*{a.arg})" for a in (args.vararg, args.kwarg)
              if a is not None and _mentions_any(a.annotation, path)]
    if _mentions_any(fn.returns, path):
        found.append(f"{where} -> ")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _class_findings(cls: ast.ClassDef, where: str, path: Path) -> list[str]:
    found = []
    for item in cls.body:
        if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and not _private(item.target.id)
                and _mentions_any(item.annotation, path)):
            found.append(f"{where}.{item.target.id}")
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) or _private(item.name):
            continue
        for sub in ast.walk(item):
            if (isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Attribute)
                    and isinstance(sub.target.value, ast.Name) and sub.target.value.id == "self"
                    and not _private(sub.target.attr) and _mentions_any(sub.annotation, path)):
                found.append(f"{where}.{sub.target.attr}")
        found += _function_findings(item, f"{where}.{item.name}", path)
    return found


def _named_classes(module: str, node: ast.AST, seen: frozenset[tuple[str, str]]) -> list[str]:
    """Findings of the classes of ``module`` that ``node``'s public annotations name (a reply's TypedDict)."""
    path = _path(module)
    assert path is not None
    classes = {c.name for c in _tree(path).body if isinstance(c, ast.ClassDef)}
    annotations: list[ast.expr | None] = []
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _private(sub.name):
            args = sub.args
            annotations += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                    *filter(None, (args.vararg, args.kwarg)))]
            annotations.append(sub.returns)
        elif isinstance(sub, ast.AnnAssign):
            annotations.append(sub.annotation)
    named = {n.id for a in annotations if a is not None for n in ast.walk(a) if isinstance(n, ast.Name)}
    found: list[str] = []
    for other in sorted(named & classes):
        found += _definition_findings(module, other, seen)
    return found


def _definition_findings(module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> list[str]:
    """What ``name`` in ``module`` exposes as ``Any``, following re-exports to where it is defined."""
    path = _path(module)
    if path is None or (module, name) in seen:
        return []
    seen = seen | {(module, name)}
    where = f"{path.relative_to(ROOT)}:{name}"
    for node in _tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return _function_findings(node, where, path) + _named_classes(module, node, seen)
        if isinstance(node, ast.ClassDef) and node.name == name:
            return _class_findings(node, where, path) + _named_classes(module, node, seen)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return [where] if _mentions_any(node.annotation, path) or _mentions_any(node.value, path) else []
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return [where] if _mentions_any(node.value, path) else []
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(path, node)
                    if source.split(".")[0] == "localrun":
                        return _definition_findings(source, alias.name, seen)
    return []


@dataclass(frozen=True)
class Seam:
    module: str  # where the name is defined (or re-exported)
    name: str
    importer: str  # the importing file, relative to localrun/


def _seams(path: Path) -> set[Seam]:
    """Every name ``path`` uses from a localrun module of another package."""
    here = _package(_module_name(path))
    tree = _tree(path)
    seams: set[Seam] = set()
    modules: dict[str, str] = {}  # local name -> module imported as a whole
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("localrun.") and alias.asname:
                    modules[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(path, node)
            if source.split(".")[0] != "localrun":
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if _path(submodule) is not None and _path(source) != _path(submodule):
                    modules[alias.asname or alias.name] = submodule
                elif _package(source) != here:
                    seams.add(Seam(source, alias.name, str(path.relative_to(ROOT))))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            module = modules[node.value.id]
            if _package(module) != here:
                seams.add(Seam(module, node.attr, str(path.relative_to(ROOT))))
    return seams


@cache
def seam_findings() -> dict[str, set[str]]:
    """Each ``Any`` annotation at a seam -> the files that import it."""
    found: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        for seam in _seams(path):
            for finding in _definition_findings(seam.module, seam.name):
                found.setdefault(finding, set()).add(seam.importer)
    return found


# Seams still typed Any when this test came (issue #17): the list may only shrink. A new finding fails
# the first test below; a fixed one left here fails the second.
KNOWN: frozenset[str] = frozenset()


def test_seams_between_packages_have_no_any() -> None:
    found = seam_findings()
    lines = [f"{what}  (imported by {', '.join(sorted(by))})" for what, by in sorted(found.items())
             if what not in KNOWN]
    assert not lines, f"{len(lines)} annotations with Any where packages meet:\n" + "\n".join(lines)


def test_known_seams_are_still_there() -> None:
    """A seam typed since is taken off KNOWN, so the list only shrinks."""
    assert not KNOWN - seam_findings().keys(), sorted(KNOWN - seam_findings().keys())


def test_the_rule_sees_a_seam() -> None:
    """The walk finds real seams (so an empty finding list means typed, not blind)."""
    seams = _seams(ROOT / "cli" / "main.py")
    assert any(seam.module.startswith("localrun.client") or seam.module.startswith("localrun.config")
               for seam in seams), seams
