"""localrun: a local-first model runner (daemon, OpenAI/Ollama APIs, terminal UI)."""

import sys as _sys
import types as _types

__version__ = "0.1.0"


def _skip_httpx_cli() -> None:
    """Keep ``import httpx`` from importing httpx's own command-line client.

    httpx's package imports its ``httpx`` command (``httpx._main``: click, rich and pygments,
    ~0.1 s) whenever those are installed, and they always are beside localrun (textual brings
    rich and pygments, huggingface-hub brings click). localrun never runs that command, yet
    every ``localrun`` command and the daemon's start paid for it. An empty stand-in registered
    under that name before httpx is first imported is what httpx's ``from ._main import main``
    then finds; its ``main`` says where the real command is. Nothing changes where httpx was
    imported first.
    """
    if "httpx" in _sys.modules or "httpx._main" in _sys.modules:
        return
    stand_in = _types.ModuleType("httpx._main", "httpx's command-line client, not loaded by localrun.")

    def main() -> None:
        raise SystemExit("httpx's command-line client is not loaded inside localrun: run `httpx` itself.")

    stand_in.main = main  # type: ignore[attr-defined]
    _sys.modules["httpx._main"] = stand_in


_skip_httpx_cli()
