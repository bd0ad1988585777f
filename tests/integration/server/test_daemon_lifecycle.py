"""``GET /api/status`` and ``POST /api/shutdown`` on the real app (issue #16); the CLI side is in tests/e2e."""

from __future__ import annotations

import os
from typing import Any

import pytest
from aiohttp import web
from daemon_helpers import DictStore

from localrun import __version__, config
from localrun.server.keys import SCHEDULER, SHUTDOWN
from localrun.server.lifecycle import DEFAULT_GRACE_S


async def test_status_names_the_process_and_its_effective_settings(serve_app: Any) -> None:
    client = await serve_app(DictStore({}), keep_alive=600.0, max_queue=7, api_key=None)
    body = await (await client.get("/api/status")).json()
    assert body["version"] == __version__ and body["pid"] == os.getpid()
    assert body["address"] == config.host().url and body["uptime_seconds"] >= 0
    assert body["settings"]["LOCALRUN_KEEP_ALIVE"] == "10m"
    assert body["settings"]["LOCALRUN_MAX_QUEUE"] == "7"
    assert body["settings"]["LOCALRUN_API_KEY"] == ""


async def test_the_api_key_is_never_shown(serve_app: Any) -> None:
    client = await serve_app(DictStore({}), api_key="sekret")
    r = await client.get("/api/status", headers={"Authorization": "Bearer sekret"})
    assert "sekret" not in await r.text()
    assert (await r.json())["settings"]["LOCALRUN_API_KEY"] == "(set)"
    assert (await client.get("/api/status")).status == 401  # like every /api route


async def test_shutdown_asks_once_and_refuses_bad_grace(serve_app: Any) -> None:
    client = await serve_app(DictStore({}))
    app: web.Application = client.server.app
    bad = await client.post("/api/shutdown", json={"grace_seconds": -1})
    assert bad.status == 400 and "grace_seconds" in (await bad.json())["error"]
    assert not app[SHUTDOWN].requested
    r = await client.post("/api/shutdown")
    assert r.status == 202 and (await r.json())["grace_seconds"] == DEFAULT_GRACE_S
    assert app[SHUTDOWN].requested
    again = await client.post("/api/shutdown", json={"grace_seconds": 30})
    assert (await again.json())["grace_seconds"] == 0  # asked twice: no more waiting


@pytest.mark.allow_5xx(reason="a 503: the daemon is shutting down on purpose")
async def test_a_shutting_down_scheduler_refuses_new_requests(serve_app: Any, tiny_gguf: Any) -> None:
    client = await serve_app(DictStore({"tiny": tiny_gguf}))
    client.server.app[SCHEDULER].refuse_new()
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi"})
    assert r.status == 503 and "shutting down" in (await r.json())["error"]
