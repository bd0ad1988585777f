"""The suite's 5xx guard (tests/serverguard.py) sees what it must, and only that.

Each test opens a window of its own inside the one every test has; those that make the daemon
answer a 5xx on purpose to see the guard catch it are marked allow_5xx for the outer window.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import serverguard
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from localrun.errors import RunnerCrashed
from localrun.server.middleware import error_middleware

LOG_5XX = "2026-01-01 00:00:00,000 WARNING localrun.server.middleware: POST /api/chat answered 502: the runner stopped"
LOG_4XX = "2026-01-01 00:00:00,000 WARNING localrun.server.middleware: POST /api/chat answered 404: no model"


def test_a_daemon_log_gives_its_5xx_lines_and_tracebacks_and_nothing_else() -> None:
    text = "\n".join([
        "2026-01-01 00:00:00,000 INFO localrun.requests: request endpoint=/api/chat status=ok answered 503",
        LOG_4XX, LOG_5XX, "Traceback (most recent call last):", '  File "x.py", line 1, in f',
        "ValueError: boom"])
    found = serverguard.findings_in_text(text, "daemon.log")
    assert len(found) == 2
    assert "answered 502" in found[0]
    assert "Traceback" in found[1] and "ValueError: boom" in found[1]


def test_a_watched_log_is_read_from_where_the_test_began(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    log.write_text(LOG_5XX + "\n")  # an earlier test's line: not this one's
    serverguard.watch_log(log)
    with serverguard.window(lambda: tmp_path / "no-background-logs") as found, log.open("a") as f:
        f.write(LOG_4XX + "\n")
    assert found == []
    with serverguard.window(lambda: tmp_path / "no-background-logs") as found, log.open("a") as f:
        f.write(LOG_5XX + "\n")
    assert len(found) == 1 and "answered 502" in found[0]


def test_a_background_daemons_log_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "serve-11435-20260101-000000-000.log").write_text(LOG_5XX + "\n")
    with serverguard.window(lambda: tmp_path) as found:
        pass
    assert len(found) == 1 and "answered 502" in found[0]


async def _client(handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                  middlewares: list[Any]) -> TestClient[web.Request, web.Application]:
    app = web.Application(middlewares=middlewares)
    app.router.add_post("/api/chat", handler)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


@pytest.mark.allow_5xx(reason="the handler raises a bug and a crashed runner on purpose: the guard must see both")
async def test_an_in_process_5xx_and_an_unhandled_exception_are_seen(tmp_path: Path) -> None:
    async def crashed(request: web.Request) -> web.Response:
        if request.query.get("bug"):
            raise KeyError("a bug")
        raise RunnerCrashed("the runner stopped")

    client = await _client(crashed, [error_middleware])
    try:
        with serverguard.window(lambda: tmp_path) as found:
            assert (await client.post("/api/chat")).status == 502
            assert (await client.post("/api/chat?bug=1")).status == 500
    finally:
        await client.close()
    assert len(found) == 2, found
    assert "POST /api/chat answered 502" in found[0]
    assert "POST /api/chat answered 500" in found[1] and "KeyError: 'a bug'" in found[1]


async def test_a_tests_own_stand_in_server_failing_is_not_the_daemons(tmp_path: Path) -> None:
    async def stand_in(request: web.Request) -> web.Response:
        raise KeyError("the stand-in's own bug")  # aiohttp logs it at ERROR: no localrun frame in it

    client = await _client(stand_in, [])
    try:
        with serverguard.window(lambda: tmp_path) as found:
            assert (await client.post("/api/chat")).status == 500
            logging.getLogger("localrun.requests").warning("request endpoint=/api/chat status=ok")
    finally:
        await client.close()
    assert found == []
