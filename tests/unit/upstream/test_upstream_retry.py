"""The retry rule of a pool: a member's failure is retried on the next member until the reply is
handed over (the first event of a stream, the end of a reply its client waits for whole), each
member at most once; after that it ends the reply with an error. httpx's mock transport stands in
for the members (a body that breaks is a member killed mid-reply)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from upstream_fakes import Breaks, sse, text_of

from localrun import errors
from localrun.chat.events import ContentDelta
from localrun.server import remote
from localrun.server.metrics import Metrics
from localrun.server.native_call import NativeCall
from localrun.upstream.pool import MemberState
from localrun.upstream.requests import ChatRequest
from localrun.upstream.router import Route, Upstreams
from localrun.upstream.spec import make_spec

REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
ROUTE = Route("gpu", "m")


def _killed_mid_reply(request: httpx.Request) -> httpx.Response:
    lost = httpx.RemoteProtocolError("peer closed connection without sending complete message body")
    return httpx.Response(200, stream=Breaks(sse("Hel", "lo, wor", finish=False), lost))


def _upstreams(handler: Callable[[httpx.Request], Any], *hosts: str) -> Upstreams:
    specs = [make_spec("gpu", f"http://{h}/v1", models="m") for h in hosts]
    return Upstreams(specs, None, transport_=httpx.MockTransport(handler))


def _states(ups: Upstreams) -> dict[str, MemberState]:
    return {m.url: m.state(ups.clock()) for m in ups.pools["gpu"].members}


async def test_a_whole_reply_lost_mid_answer_is_answered_by_the_next_member() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "a":
            return _killed_mid_reply(request)
        return httpx.Response(200, content=sse("Hello", " there"))

    ups = _upstreams(handler, "a", "b")
    try:
        reply = await ups.chat(ROUTE, REQ, stream=False)
        assert reply.done is not None and reply.done.prompt_eval_count == 3  # read whole before the handover
        assert await text_of(reply) == "Hello there"  # nothing of a's broken answer
        assert seen == ["a", "b"]
        assert _states(ups) == {"http://a": MemberState.COOLING, "http://b": MemberState.HEALTHY}
        assert [m.in_flight for m in ups.pools["gpu"].members] == [0, 0]
        seen.clear()
        assert await text_of(await ups.chat(ROUTE, REQ, stream=False)) == "Hello there"
        assert seen == ["b"]  # the next requests avoid the dead member
    finally:
        await ups.close()


async def test_a_whole_reply_that_ends_without_its_final_chunk_is_retried() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a":  # a clean end, but no finish_reason: the answer may be cut
            return httpx.Response(200, content=sse("Hel", finish=False))
        return httpx.Response(200, content=sse("Hello"))

    ups = _upstreams(handler, "a", "b")
    try:
        assert await text_of(await ups.chat(ROUTE, REQ, stream=False)) == "Hello"
        assert _states(ups)["http://a"] is MemberState.COOLING
    finally:
        await ups.close()


async def test_each_member_is_tried_once_then_the_request_fails_naming_each() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        return _killed_mid_reply(request)

    ups = _upstreams(handler, "a", "b", "c")
    try:
        with pytest.raises(errors.UpstreamUnavailable) as info:
            await ups.chat(ROUTE, REQ, stream=False)
        assert sorted(seen) == ["a", "b", "c"]
        assert all(f"http://{h}: peer closed connection" in str(info.value) for h in "abc")
        assert set(_states(ups).values()) == {MemberState.COOLING}
        assert [m.in_flight for m in ups.pools["gpu"].members] == [0, 0, 0]
    finally:
        await ups.close()


async def test_a_stream_is_the_callers_from_its_first_event_and_then_ends_with_an_error() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        return _killed_mid_reply(request)

    ups = _upstreams(handler, "a", "b")
    try:
        reply = await ups.chat(ROUTE, REQ, stream=True)
        got: list[str] = []
        with pytest.raises(errors.UpstreamError, match="failed mid-reply: peer closed connection"):
            async for event in reply.events():
                got.append(event.text if isinstance(event, ContentDelta) else "")
        await reply.close()
        assert got == ["Hel", "lo, wor"]  # what its client already has is never sent twice
        assert seen == ["a"]
        assert _states(ups)["http://a"] is MemberState.COOLING
    finally:
        await ups.close()


async def test_n_whole_replies_start_together_and_none_is_left_open_when_one_fails() -> None:
    arrived = 0
    both = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal arrived
        assert request.url.path == "/v1/chat/completions"
        arrived += 1
        if arrived == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)  # one after the other, the first would wait forever
        return httpx.Response(200, content=sse("ok"))

    ups = _upstreams(handler, "a", "b")
    try:
        call = NativeCall(model="gpu/m", options={}, keep_alive=None, n=2,
                          messages=[{"role": "user", "content": "hi"}])
        outputs = await remote.chat_outputs(ups, Metrics(), ROUTE, call, "/v1/chat/completions")
        assert len(outputs) == 2 and all(o.done is not None for o in outputs)
        for out in outputs:
            await out.close()
    finally:
        await ups.close()

    async def refuse_the_second(request: httpx.Request) -> httpx.Response:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            return httpx.Response(400, json={"error": {"message": "bad request"}})
        return httpx.Response(200, content=sse("ok"))

    arrived = 0
    ups = _upstreams(refuse_the_second, "a", "b")
    try:
        call = NativeCall(model="gpu/m", options={}, keep_alive=None, n=2,
                          messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(errors.InvalidRequest, match="bad request"):
            await remote.chat_outputs(ups, Metrics(), ROUTE, call, "/v1/chat/completions")
        assert [m.in_flight for m in ups.pools["gpu"].members] == [0, 0]
    finally:
        await ups.close()
