"""The blocking Client is generated from AsyncClient (scripts/render_sync_client.py) and kept in step."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

from localrun.client import AsyncClient, Client

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "render_sync_client.py"


def _render_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("render_sync_client", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_client_is_what_the_script_writes() -> None:
    render = _render_module()
    source = render.CLIENT.read_text(encoding="utf-8")
    assert render.render(source) == source, "run scripts/render_sync_client.py after changing AsyncClient"


def test_both_clients_offer_the_same_calls() -> None:
    def calls(cls: type) -> dict[str, list[str]]:
        return {name: list(inspect.signature(fn).parameters) for name, fn in vars(cls).items()
                if callable(fn) and not name.startswith("_")}

    renamed = {"aclose": "close"}
    assert {renamed.get(k, k): v for k, v in calls(AsyncClient).items()} == calls(Client)
