"""The arrows between packages point inward: a module never imports a package further out,
and no modules import each other in a circle.

chat (pure: templates, prompts, reply parsing) and engine (the only llama_cpp user) < hardware
(devices, memory fit, placement) < runtime (resident models) < server (aiohttp); upstream (the
pools of other daemons) sits beside runtime, under the server; the CLI and the TUI reach the
daemon only through localrun/client.py. Read from the source with ``ast``, so nothing is imported
and a lazy import inside a function (or one under ``TYPE_CHECKING``) counts: a circle hidden
that way is still a circle for a reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import localrun

ROOT = Path(localrun.__file__).parent

# package -> what its modules must never import (localrun subpackages and third-party top-level names)
FORBIDDEN = {
    "chat": {"localrun.engine", "localrun.hardware", "localrun.runtime", "localrun.server", "localrun.tui",
             "localrun.cli", "localrun.client", "localrun.store", "localrun.upstream", "aiohttp", "textual",
             "llama_cpp", "concurrent", "multiprocessing", "subprocess"},
    "engine": {"localrun.chat", "localrun.hardware", "localrun.runtime", "localrun.server", "localrun.tui",
               "localrun.cli", "localrun.client", "localrun.store", "localrun.upstream", "aiohttp", "textual"},
    "hardware": {"localrun.runtime", "localrun.server", "localrun.tui", "localrun.cli", "localrun.client",
                 "localrun.upstream", "aiohttp", "textual"},
    "runtime": {"localrun.server", "localrun.tui", "localrun.cli", "localrun.client", "localrun.upstream",
                "aiohttp", "textual"},
    "store": {"localrun.engine", "localrun.runtime", "localrun.server", "localrun.tui", "localrun.cli",
              "localrun.upstream", "textual"},
    "upstream": {"localrun.hardware", "localrun.runtime", "localrun.store", "localrun.server", "localrun.tui",
                 "localrun.cli", "localrun.client", "aiohttp", "textual"},
    "tui": {"localrun.server", "localrun.runtime", "localrun.engine", "localrun.upstream", "aiohttp"},
}


def _statements(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Each import in ``path`` as (absolute module, the names taken from it: [] for ``import m``)."""
    package = ".".join(("localrun", *path.relative_to(ROOT).with_suffix("").parts[:-1]))
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module, [alias.name for alias in node.names]


def _imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    names: set[str] = set()
    for module, taken in _statements(path):
        names.add(module)
        names.update(f"{module}.{name}" for name in taken)  # `from .. import hardware`
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_further_out(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[package]):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def _module_graph() -> dict[str, set[str]]:
    """Each localrun module and the localrun modules it imports. ``from . import x`` is an arrow to
    the module ``x``, ``from .x import name`` one to ``x``: neither to the package's ``__init__``."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = ("localrun", *path.relative_to(ROOT).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        arrows: set[str] = set()
        for module, taken in _statements(path):
            for target in [f"{module}.{t}" for t in taken] or [module]:
                arrows.add(target if target in modules else module)
        arrows &= modules.keys()
        arrows.discard(name)
        graph[name] = arrows
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert _circles(_module_graph()) == []


def test_the_circle_check_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
