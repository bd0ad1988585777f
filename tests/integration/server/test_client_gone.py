"""A client that leaves mid-stream is not an error on our side: no traceback, no 500 in the metrics."""

from __future__ import annotations

import logging

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from localrun.server.middleware import error_middleware


async def test_a_write_to_a_closed_client_is_answered_quietly(caplog: pytest.LogCaptureFixture) -> None:
    async def streaming(request: web.Request) -> web.StreamResponse:
        raise ConnectionResetError("Cannot write to closing transport")  # what aiohttp's writer raises

    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/stream", streaming)
    caplog.set_level(logging.DEBUG)
    async with TestClient(TestServer(app)) as client:
        r = await client.get("/stream")
        assert r.status == 499
    assert "Traceback" not in caplog.text and "internal error" not in caplog.text
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
