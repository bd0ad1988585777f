"""`localrun bench` with no --model picks the loaded model, else the starter, and says which (issue #16)."""

from __future__ import annotations

from typing import Any

import httpx

from localrun.cli.bench_cmd import default_model
from localrun.client import Client
from localrun.store.starter import STARTER


def _client(models: list[dict[str, Any]]) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/ps"
        return httpx.Response(200, json={"models": models})

    return Client("http://daemon.test", transport=httpx.MockTransport(handler))


def test_nothing_loaded_means_the_starter() -> None:
    name, why = default_model(_client([]))
    assert name == str(STARTER)
    assert "starter" in why and "nothing is loaded" in why


def test_the_loaded_model_is_measured() -> None:
    name, why = default_model(_client([{"name": "tiny:latest", "loaded_at": "2026-01-01T00:00:00Z"}]))
    assert name == "tiny:latest" and "loaded" in why


def test_of_several_loaded_models_the_newest_load_and_the_others_are_named() -> None:
    name, why = default_model(_client([
        {"name": "a:latest", "loaded_at": "2026-01-01T00:00:00Z"},
        {"name": "b:latest", "loaded_at": "2026-01-01T00:05:00Z"},
    ]))
    assert name == "b:latest" and "a:latest" in why
