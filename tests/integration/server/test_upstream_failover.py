"""A pool member lost mid-answer, seen by the clients of the real app in front of it (issue #26 point 5).

Two scripted ``/v1`` upstreams on 127.0.0.1: ``dying`` streams the start of an answer and then
drops the connection (as a server killed with SIGKILL does); ``healthy`` answers in full. The
pool lists ``dying`` first, so a fresh front sends its first request there. A request whose
client has received nothing is answered by ``healthy``; a stream already under way ends with its
own API's error event (NDJSON ``{"error": ...}``, an SSE error object then ``[DONE]``, Anthropic's
``event: error``), never with a cut connection.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from daemon_helpers import DictStore

from localrun.config import load_settings
from localrun.server.app import create_app
from localrun.upstream.router import Upstreams
from localrun.upstream.spec import make_spec

pytestmark = pytest.mark.timeout(60)

ANSWER = "Hello from the healthy one"
Front = TestClient[web.Request, web.Application]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
                                                                       "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


class Member:
    """A scripted ``/v1`` upstream; with ``dies_after`` (content pieces) set, it sends those and
    then drops the connection, else it answers ANSWER in full."""

    def __init__(self, dies_after: list[str] | None) -> None:
        self.dies_after = dies_after
        self.chats = 0
        self.app = web.Application()
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_post("/v1/chat/completions", self.chat)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.chats += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk({"role": "assistant", "content": ""}))
        if self.dies_after is not None:
            await resp.write(b"".join(_chunk({"content": piece}) for piece in self.dies_after))
            assert request.transport is not None
            request.transport.abort()  # no last chunk, no [DONE]: the connection is simply gone
            return resp
        for piece in (ANSWER[:5], ANSWER[5:]):
            await resp.write(_chunk({"content": piece}))
        await resp.write(_chunk({}, "stop") + b'data: {"choices": [], "usage": {"prompt_tokens": 5, '
                         b'"completion_tokens": 2}}\n\ndata: [DONE]\n\n')
        await resp.write_eof()
        return resp


@pytest.fixture
async def pool(tiny_gguf: Any) -> AsyncIterator[tuple[Front, Member, Member]]:
    """The front, with ``gpu`` = [dying, healthy]."""
    dying, healthy = Member(dies_after=["Hel", "lo, wor"]), Member(dies_after=None)
    servers = [TestServer(dying.app, host="127.0.0.1"), TestServer(healthy.app, host="127.0.0.1")]
    for s in servers:
        await s.start_server()
    upstreams = Upstreams([make_spec("gpu", str(s.make_url("/v1"))) for s in servers], None)
    store: Any = DictStore({"tiny": tiny_gguf})  # the ModelStore methods the app calls
    app = create_app(load_settings(), store=store, upstreams=upstreams)
    client = TestClient(TestServer(app, host="127.0.0.1", handler_cancellation=True))
    await client.start_server()
    yield client, dying, healthy
    await client.close()
    for s in servers:
        await s.close()


MESSAGES = [{"role": "user", "content": "hi"}]
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "api": ("/api/chat", {"model": "gpu/m", "messages": MESSAGES}),
    "v1": ("/v1/chat/completions", {"model": "gpu/m", "messages": MESSAGES}),
    "anthropic": ("/v1/messages", {"model": "gpu/m", "messages": MESSAGES, "max_tokens": 50}),
}


def _content(api: str, reply: dict[str, Any]) -> str:
    if api == "api":
        return str(reply["message"]["content"])
    if api == "v1":
        return str(reply["choices"][0]["message"]["content"])
    return str(reply["content"][0]["text"])


@pytest.mark.parametrize("api", list(REQUESTS))
async def test_a_request_not_streamed_lost_mid_answer_is_answered_by_the_other_member(
        pool: tuple[Front, Member, Member], api: str) -> None:
    client, dying, healthy = pool
    path, body = REQUESTS[api]
    resp = await client.post(path, json={**body, "stream": False})
    assert resp.status == 200, await resp.text()
    assert _content(api, await resp.json()) == ANSWER  # nothing of the lost answer
    assert (dying.chats, healthy.chats) == (1, 1)
    ps = {m["url"]: m for m in (await (await client.get("/api/ps")).json())["upstreams"]}
    assert [m["state"] for m in ps.values()] == ["cooling", "healthy"]
    resp = await client.post(path, json={**body, "stream": False})
    assert resp.status == 200 and (dying.chats, healthy.chats) == (1, 2)  # the next one avoids it


async def test_a_stream_that_had_not_begun_is_answered_by_the_other_member(
        pool: tuple[Front, Member, Member]) -> None:
    client, dying, healthy = pool
    dying.dies_after = []  # its reply starts (HTTP 200, the role chunk), then it dies before any content
    resp = await client.post("/v1/chat/completions", json={**REQUESTS["v1"][1], "stream": True})
    assert resp.status == 200
    text = await resp.text()
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    got = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert got == ANSWER and text.rstrip().endswith("data: [DONE]") and '"error"' not in text
    assert (dying.chats, healthy.chats) == (1, 1)


@pytest.mark.parametrize("api", list(REQUESTS))
async def test_a_stream_under_way_ends_with_its_own_error_event(
        pool: tuple[Front, Member, Member], api: str) -> None:
    client, dying, healthy = pool
    path, body = REQUESTS[api]
    resp = await client.post(path, json={**body, "stream": True})
    assert resp.status == 200
    text = await resp.text()  # read to its end: a cut connection would raise here
    assert (dying.chats, healthy.chats) == (1, 0)  # what the client has is never sent twice
    if api == "api":
        lines = [json.loads(line) for line in text.splitlines() if line]
        assert "".join(c["message"]["content"] for c in lines[:-1]) == "Hello, wor"
        assert "failed mid-reply" in lines[-1]["error"]
    elif api == "v1":
        events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert "failed mid-reply" in error["message"] and error["code"] is not None
    else:
        blocks = [b.split("\n") for b in text.strip().split("\n\n")]
        last_name, last_data = blocks[-1][0], json.loads(blocks[-1][1].removeprefix("data: "))
        assert last_name == "event: error" and last_data["type"] == "error"
        assert "failed mid-reply" in last_data["error"]["message"]
        assert "message_stop" not in text
    ps = {m["url"]: m for m in (await (await client.get("/api/ps")).json())["upstreams"]}
    assert [m["state"] for m in ps.values()] == ["cooling", "unknown"]
