"""localrun.client against injected transports: error mapping, streams, an absent daemon."""

from __future__ import annotations

import json

import httpx
import pytest

from localrun import errors
from localrun.client import AsyncClient, Client


def _handler(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/api/tags":
        return httpx.Response(200, json={"models": [{"name": "a:latest"}]})
    if request.url.path == "/api/generate":
        body = json.loads(request.content)
        if body["model"] == "busy":
            return httpx.Response(503, json={"error": "busy", "code": "server_busy"}, headers={"Retry-After": "4"})
        if body["model"] == "crash":
            lines = [{"response": "a", "done": False}, {"error": "runner died", "code": "runner_crashed"}]
        else:
            lines = [{"response": "a", "done": False}, {"response": "", "done": True, "done_reason": "stop"}]
        return httpx.Response(200, content="".join(json.dumps(x) + "\n" for x in lines).encode())
    if request.url.path == "/api/show":
        return httpx.Response(404, json={"error": "model 'x' not found", "code": "model_not_found"})
    if request.url.path == "/v1/models/x":
        return httpx.Response(404, json={"error": {"message": "nope", "type": "invalid_request_error",
                                                   "code": "model_not_found"}})
    return httpx.Response(500, text="boom")


def test_sync_client_maps_errors_and_streams() -> None:
    with Client("http://daemon", transport=httpx.MockTransport(_handler)) as c:
        assert c.list() == [{"name": "a:latest"}]
        assert [x["done"] for x in c.generate("m", "hi")] == [False, True]
        with pytest.raises(errors.Busy) as busy:
            list(c.generate("busy", "hi"))
        assert busy.value.retry_after == 4
        with pytest.raises(errors.RunnerCrashed, match="runner died"):
            list(c.generate("crash", "hi"))
        with pytest.raises(errors.ModelNotFound):
            c.show("x")
        with pytest.raises(errors.ModelNotFound):
            c._request("GET", "/v1/models/x")
        with pytest.raises(errors.LocalrunError):
            c.ps()


async def test_async_client_streams_and_maps_errors() -> None:
    async with AsyncClient("http://daemon", transport=httpx.MockTransport(_handler)) as c:
        assert [x["done"] async for x in c.generate("m", "hi")] == [False, True]
        with pytest.raises(errors.ModelNotFound):
            await c.show("x")


def test_no_daemon_is_a_clear_error() -> None:
    c = Client("http://127.0.0.1:9")  # nothing listens on the discard port
    assert not c.is_running()
    with pytest.raises(errors.DaemonUnavailable, match="no localrun daemon answers"):
        c.ps()


def test_ps_table_matches_ollamas_columns() -> None:
    import datetime as dt

    from localrun.cli.daemon_cmds import ps_table
    from localrun.fmt import until

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert until("2026-01-01T00:04:30Z", now) == "4 minutes from now"
    assert until("2318-11-22T00:00:00Z", now) == "Forever"
    assert until("2025-12-31T23:59:59Z", now) == "Stopping..."
    table = ps_table([{"name": "gemma3:270m", "digest": "sha256:" + "ab" * 32, "size": 921_000_000,
                       "size_vram": 0, "processor": "48%/52% CPU/GPU", "context_length": 32768,
                       "context_pool": 65536, "num_parallel": 16, "active": 3, "expires_at": "2318-11-22T00:00:00Z"}])
    header, row = table.splitlines()
    assert header.split() == ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "POOL", "SLOTS", "THREADS", "UNTIL"]
    assert row.split() == ["gemma3:270m", "abababababab", "921", "MB", "48%/52%", "CPU/GPU", "32768", "65536", "3/16",
                           "-", "Forever"]


def test_ps_says_why_a_model_runs_on_fewer_threads_than_cores() -> None:
    from localrun.cli.daemon_cmds import ps_table

    base = {"name": "qwen", "digest": "", "size": 1, "num_parallel": 16, "active": 1}
    quiet = ps_table([{**base, "threads": {"decode": 2, "prefill": 2, "cores": 2, "pinned": False,
                                           "other_load": 0.0}}])
    assert len(quiet.splitlines()) == 2 and "2/2" in quiet
    busy = ps_table([{**base, "threads": {"decode": 1, "prefill": 2, "cores": 2, "pinned": False,
                                          "other_load": 0.4}}]).splitlines()
    assert "1/2" in busy[1]
    assert busy[2] == "  qwen: 1 threads decode and 2 prefill: other processes use 0.4 of 2 cores"
    pinned = ps_table([{**base, "threads": {"decode": 3, "prefill": 3, "cores": 8, "pinned": True,
                                            "other_load": 0.0}}]).splitlines()
    assert pinned[2] == "  qwen: 3 threads, pinned by num_thread"
