"""The arrows between packages point inward: a module never imports a package further out.

engine (the only llama_cpp user) < hardware (devices, memory fit, placement) < runtime (resident
models) < server (aiohttp); the CLI and the TUI reach the daemon only through localrun/client.py.
Read from the source with ``ast``, so nothing is imported and a lazy import inside a function counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import localrun

ROOT = Path(localrun.__file__).parent

# package -> what its modules must never import (localrun subpackages and third-party top-level names)
FORBIDDEN = {
    "engine": {"localrun.hardware", "localrun.runtime", "localrun.server", "localrun.tui", "localrun.cli",
               "localrun.client", "localrun.store", "aiohttp", "textual"},
    "hardware": {"localrun.runtime", "localrun.server", "localrun.tui", "localrun.cli", "localrun.client",
                 "aiohttp", "textual"},
    "runtime": {"localrun.server", "localrun.tui", "localrun.cli", "localrun.client", "aiohttp", "textual"},
    "store": {"localrun.engine", "localrun.runtime", "localrun.server", "localrun.tui", "localrun.cli", "textual"},
    "tui": {"localrun.server", "localrun.runtime", "localrun.engine", "aiohttp"},
}


def _imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    package = ".".join(("localrun", *path.relative_to(ROOT).with_suffix("").parts[:-1]))
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # `from .. import hardware`
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_further_out(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[package]):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)
