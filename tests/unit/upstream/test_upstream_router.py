"""Routing, failover before the first event, errors and credentials, with httpx's mock transport."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from upstream_fakes import Breaks, sse, text_of

from localrun import errors
from localrun.chat.events import ContentDelta
from localrun.upstream.pool import MemberState
from localrun.upstream.requests import ChatRequest, RerankRequest
from localrun.upstream.router import Route, Upstreams
from localrun.upstream.spec import make_spec

KEY = "sk-very-secret-key-123"
REQ = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])


def _upstreams(handler: Callable[[httpx.Request], Any], *urls: str, key_env: str | None = None) -> Upstreams:
    specs = [make_spec("gpu", u, api_key_env=key_env, models="m") for u in urls]
    return Upstreams(specs, None, api_key=lambda var: KEY if var == "GPU_KEY" else None,
                     transport_=httpx.MockTransport(handler))


async def test_fails_over_before_the_first_event_and_cools_the_member_down() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "a":
            raise httpx.ConnectError("connection refused")
        if request.url.host == "b":
            return httpx.Response(503, json={"error": {"message": "loading"}})
        if request.url.host == "c":  # answers, then breaks before any content: still failover
            return httpx.Response(200, stream=Breaks(b'data: {"choices": [{"index": 0, '
                                                      b'"delta": {"role": "assistant"}}]}\n\n'))
        return httpx.Response(200, content=sse("Hel", "lo"))

    ups = _upstreams(handler, "http://a/v1", "http://b/v1", "http://c/v1", "http://d/v1")
    try:
        reply = await ups.chat(Route("gpu", "m"), REQ)
        assert await text_of(reply) == "Hello"
        assert reply.done is not None and reply.done.prompt_eval_count == 3
        assert seen == ["a", "b", "c", "d"]
        states = {m.url: m.state(ups.clock()) for m in ups.pools["gpu"].members}
        assert states == {"http://a": MemberState.COOLING, "http://b": MemberState.COOLING,
                          "http://c": MemberState.COOLING, "http://d": MemberState.HEALTHY}
        assert [m.in_flight for m in ups.pools["gpu"].members] == [0, 0, 0, 0]
        seen.clear()
        await text_of(await ups.chat(Route("gpu", "m"), REQ))
        assert seen == ["d"]  # the cooling ones are skipped while another member is healthy
    finally:
        await ups.close()


async def test_a_break_after_streaming_started_ends_the_stream_with_an_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Breaks(sse("Hel", finish=False)))

    ups = _upstreams(handler, "http://a/v1", "http://b/v1")
    try:
        reply = await ups.chat(Route("gpu", "m"), REQ)
        got = []
        with pytest.raises(errors.UpstreamError, match="failed mid-reply"):
            async for event in reply.events():
                got.append(event)
        await reply.close()
        assert got == [ContentDelta("Hel")]
        assert reply.member.state(ups.clock()) is MemberState.COOLING
    finally:
        await ups.close()


async def test_client_errors_are_not_retried_and_never_show_the_key() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(400, json={"error": {"message": f"bad temperature (key {KEY})"}})

    ups = _upstreams(handler, "http://a/v1", "http://b/v1", key_env="GPU_KEY")
    try:
        with pytest.raises(errors.InvalidRequest) as info:
            await ups.chat(Route("gpu", "m"), REQ)
        assert "bad temperature" in str(info.value) and KEY not in str(info.value)
        assert len(calls) == 1
        assert calls[0].headers["authorization"] == f"Bearer {KEY}"
        assert all(m.state(ups.clock()) is not MemberState.COOLING for m in ups.pools["gpu"].members)
    finally:
        await ups.close()


async def test_when_every_member_fails_the_error_says_why_for_each() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text=f"internal error, token={KEY}")

    ups = _upstreams(handler, "http://a/v1", "http://b/v1", key_env="GPU_KEY")
    try:
        with pytest.raises(errors.UpstreamUnavailable) as info:
            await ups.chat(Route("gpu", "m"), REQ)
        message = str(info.value)
        assert "http://a: HTTP 500" in message and "http://b: HTTP 500" in message
        assert KEY not in message
        snapshot = ups.snapshot()
        assert all(KEY not in repr(s) for s in snapshot)
        with pytest.raises(errors.ModelNotFound, match="not served by upstream gpu"):
            await ups.chat(Route("gpu", "other-model"), REQ)
    finally:
        await ups.close()


async def test_a_missing_key_variable_is_a_clear_member_failure() -> None:
    ups = Upstreams([make_spec("gpu", "http://a/v1", api_key_env="UNSET_VAR", models="m")], None,
                    api_key=lambda var: None, transport_=httpx.MockTransport(lambda r: httpx.Response(200)))
    try:
        with pytest.raises(errors.UpstreamUnavailable, match="UNSET_VAR is not set"):
            await ups.chat(Route("gpu", "m"), REQ)
    finally:
        await ups.close()


async def test_the_api_is_learnt_from_the_server() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path == "/api/tags":
            return httpx.Response(200, json={"models": [{"name": "llama3:8b"}]})
        if request.url.path == "/api/chat":
            body = json.loads(request.content)
            assert body["model"] == "llama3:8b" and body["stream"] is True
            lines = [{"message": {"content": "ok"}, "done": False},
                     {"message": {"content": ""}, "done": True, "done_reason": "stop", "eval_count": 1}]
            return httpx.Response(200, content="".join(json.dumps(x) + "\n" for x in lines).encode())
        return httpx.Response(404)

    ups = Upstreams([make_spec("old", "http://ollama-box:11434")], None, transport_=httpx.MockTransport(handler))
    try:
        await ups.refresh()
        assert [m.name for m in ups.listed()] == ["old/llama3:8b"]
        assert await text_of(await ups.chat(Route("old", "llama3:8b"), REQ)) == "ok"
        assert paths == ["/v1/models", "/api/tags", "/api/chat"]
        assert ups.route("old/llama3:8b") == Route("old", "llama3:8b")
        assert ups.route("library/llama3") is None  # not an upstream: an Ollama namespace
    finally:
        await ups.close()


async def test_reranking_goes_to_v1_members_only_and_fails_over_on_a_reply_it_cannot_read() -> None:
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.url.path))
        if request.url.host == "a":  # answers 200 with a result missing: not a reply to hand on
            return httpx.Response(200, json={"results": [{"index": 0, "relevance_score": 1.0}]})
        body = json.loads(request.content)
        assert body["model"] == "m" and body["top_n"] == 2 and body["return_documents"] is False
        return httpx.Response(200, json={"results": [{"index": 1, "relevance_score": 3.0},
                                                     {"index": 0, "relevance_score": -2.0}],
                                         "usage": {"prompt_tokens": 9}})

    specs = [make_spec("gpu", "http://o", api="ollama", models="m"),
             make_spec("gpu", "http://a/v1", models="m"), make_spec("gpu", "http://b/v1", models="m")]
    ups = Upstreams(specs, None, transport_=httpx.MockTransport(handler))
    try:
        result = await ups.rerank(Route("gpu", "m"), RerankRequest(model="m", query="q", documents=["x", "y"]))
        assert result.scores == [-2.0, 3.0] and result.prompt_eval_count == 9 and result.truncated == [False, False]
        assert ("o", "/api/rerank") not in seen and ("o", "/v1/rerank") not in seen
        assert ("a", "/v1/rerank") in seen and seen[-1] == ("b", "/v1/rerank")
        states = {m.url: m.state(ups.clock()) for m in ups.pools["gpu"].members}
        assert states["http://o"] is not MemberState.COOLING and states["http://a"] is MemberState.COOLING
        assert [m.in_flight for m in ups.pools["gpu"].members] == [0, 0, 0]
        assert [m.requests for m in ups.pools["gpu"].members] == [0, 1, 1]  # the one passed over counts none
    finally:
        await ups.close()


async def test_a_pool_that_speaks_only_ollamas_api_cannot_rerank_and_says_so() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"nothing is sent: {request.url}")

    ups = Upstreams([make_spec("old", "http://o", api="ollama", models="m")], None,
                    transport_=httpx.MockTransport(handler))
    try:
        with pytest.raises(errors.UnsupportedCapability, match="speaks Ollama's API, which has no reranking"):
            await ups.rerank(Route("old", "m"), RerankRequest(model="m", query="q", documents=["x"]))
        assert ups.pools["old"].members[0].in_flight == 0 and ups.pools["old"].members[0].requests == 0
    finally:
        await ups.close()


async def test_a_member_without_the_feature_is_a_400_and_stays_healthy() -> None:
    def handler(request: httpx.Request) -> httpx.Response:  # llama-server started without --rerank
        return httpx.Response(501, json={"error": {"code": 501, "type": "not_supported_error",
                                                   "message": "This server does not support reranking."}})

    ups = Upstreams([make_spec("gpu", "http://a/v1", models="m")], None, transport_=httpx.MockTransport(handler))
    try:
        with pytest.raises(errors.UnsupportedCapability, match="upstream gpu: This server does not support reranking"):
            await ups.rerank(Route("gpu", "m"), RerankRequest(model="m", query="q", documents=["x"]))
        member = ups.pools["gpu"].members[0]
        assert member.state(ups.clock()) is not MemberState.COOLING and member.in_flight == 0
    finally:
        await ups.close()


async def test_a_reply_nested_past_the_limit_fails_the_member_not_the_request_handler() -> None:
    deep = b"[" * 5000 + b"]" * 5000

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":  # the check reads it too
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        return httpx.Response(200, content=deep, headers={"content-type": "application/json"})

    ups = _upstreams(handler, "http://a/v1")
    try:
        with pytest.raises(errors.UpstreamUnavailable, match=r"not JSON.*nests deeper than 128"):
            await ups.rerank(Route("gpu", "m"), RerankRequest(model="m", query="q", documents=["x"]))
    finally:
        await ups.close()
