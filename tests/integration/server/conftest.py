"""Fixtures for the daemon tests: the real aiohttp app on 127.0.0.1, runner processes, a model store.

``serve_app(store, ...)`` starts the app with handler cancellation on (as ``localrun serve`` runs
it) and returns an aiohttp TestClient. ``fake_runners`` makes runner processes host
``fake_engine.FakeEngine`` (timing under test control) instead of llama.cpp.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from daemon_helpers import DictStore  # noqa: F401  (re-exported for tests)

from localrun.config import Settings, load_settings
from localrun.server.app import create_app, runner_load_fn

HERE = Path(__file__).parent


def make_settings(**overrides: Any) -> Settings:
    return dataclasses.replace(load_settings(), **overrides)


@pytest.fixture
def fake_runners(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """A load_fn whose runner processes host the fake engine (debug crash op enabled)."""
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "LOCALRUN_RUNNER_DEBUG": "1"}
    return runner_load_fn("fake_engine:FakeEngine", env)


@pytest.fixture
async def serve_app() -> AsyncIterator[Callable[..., Any]]:
    clients: list[TestClient] = []

    async def start(store: Any, *, load_fn: Any = None, **settings: Any) -> TestClient:
        app: web.Application = create_app(make_settings(**settings), store=store, load_fn=load_fn)
        client = TestClient(TestServer(app, host="127.0.0.1", handler_cancellation=True))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()
