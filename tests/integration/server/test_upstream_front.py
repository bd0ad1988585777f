"""The daemon in front of upstreams: every API on NAME/model, translated, with no credential leaking.

Two scripted upstreams on 127.0.0.1 record what they receive: one speaks only OpenAI's /v1
(it streams reasoning, then a tool call in fragments), one only Ollama's /api. The official
ollama, openai and anthropic clients talk to the real app in front of them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import ollama
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from daemon_helpers import DictStore

from localrun.config import load_settings
from localrun.server.app import create_app
from localrun.upstream.router import Upstreams
from localrun.upstream.spec import make_spec

pytestmark = pytest.mark.timeout(120)

UPSTREAM_KEY = "sk-upstream-secret-0042"
CLIENT_KEY = "client-own-secret-77"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}]


def _sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
                                                                      "finish_reason": finish}]}


class Recorder:
    """A scripted upstream; ``seen`` holds (path, headers, body) of every request."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.seen: list[tuple[str, dict[str, str], Any]] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.seen.append((request.path, dict(request.headers), body))
        if self.api == "openai":
            return await self._openai(request, body)
        return await self._ollama(request, body)

    async def _openai(self, request: web.Request, body: Any) -> web.StreamResponse:
        if request.path == "/v1/models":
            return web.json_response({"object": "list", "data": [{"id": "big-model", "object": "model"}]})
        if request.path == "/v1/embeddings":
            return web.json_response({"data": [{"index": i, "embedding": [0.6, 0.8]}
                                               for i, _ in enumerate(body["input"])],
                                      "usage": {"prompt_tokens": 4}})
        if request.path == "/v1/rerank":  # scores by length, listed worst first, the cut one named as localrun does
            results = [{"index": i, "relevance_score": float(len(d))} for i, d in enumerate(body["documents"])]
            return web.json_response({"results": sorted(results, key=lambda r: r["relevance_score"]),
                                      "usage": {"prompt_tokens": 21, "total_tokens": 21},
                                      "meta": {"warnings": ["document 0 was cut to fit the model's context"]}})
        if request.path == "/v1/completions":
            chunks = [{"choices": [{"index": 0, "text": t, "finish_reason": None}]} for t in ("Once", " upon")]
            chunks.append({"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                           "usage": {"prompt_tokens": 2, "completion_tokens": 2}})
            return web.Response(body=_sse(chunks), content_type="text/event-stream")
        if request.path != "/v1/chat/completions":
            return web.json_response({"error": {"message": "no such route"}}, status=404)
        last = body["messages"][-1]["content"]
        if "weather" in last and body.get("tools"):
            chunks = [_delta({"role": "assistant", "content": ""}), _delta({"reasoning_content": "Paris, so "}),
                      _delta({"reasoning_content": "call the tool."}),
                      _delta({"tool_calls": [{"index": 0, "id": "call_up1", "type": "function",
                                              "function": {"name": "get_weather", "arguments": '{"ci'}}]}),
                      _delta({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]}),
                      _delta({}, "tool_calls")]
        else:
            text = '{"a": 1}' if body.get("response_format") else "Hello from upstream"
            chunks = ([_delta({"role": "assistant", "content": ""})]
                      + [_delta({"content": w}) for w in (text[:5], text[5:])])
            chunks.append(_delta({}, "stop"))
        chunks.append({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 3,
                                                "prompt_tokens_details": {"cached_tokens": 8}}})
        return web.Response(body=_sse(chunks), content_type="text/event-stream")

    async def _ollama(self, request: web.Request, body: Any) -> web.StreamResponse:
        if request.path == "/api/tags":
            return web.json_response({"models": [{"name": "llama3:8b", "model": "llama3:8b"}]})
        if request.path == "/api/show":
            return web.json_response({"capabilities": ["completion", "vision", "thinking"], "model_info": {},
                                      "details": {"family": "llama", "parameter_size": "8.0B",
                                                  "quantization_level": "Q4_K_M", "families": ["llama", 7]}})
        if request.path != "/api/chat":
            return web.json_response({"error": "not found"}, status=404)
        lines = [{"model": "llama3:8b", "message": {"role": "assistant", "content": w}, "done": False}
                 for w in ("Hi ", "there")]
        lines.append({"model": "llama3:8b", "message": {"role": "assistant", "content": ""}, "done": True,
                      "done_reason": "stop", "prompt_eval_count": 7, "eval_count": 2})
        return web.Response(body="".join(json.dumps(x) + "\n" for x in lines), content_type="application/x-ndjson")


@pytest.fixture
async def front(tiny_gguf: Any,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[TestClient, Recorder, Recorder]]:
    v1, api = Recorder("openai"), Recorder("ollama")
    servers = [TestServer(v1.app, host="127.0.0.1"), TestServer(api.app, host="127.0.0.1")]
    for s in servers:
        await s.start_server()
    monkeypatch.setenv("GPU_KEY", UPSTREAM_KEY)
    specs = [make_spec("gpu", str(servers[0].make_url("/v1")), api_key_env="GPU_KEY"),
             make_spec("old", str(servers[1].make_url("/")).rstrip("/"))]
    upstreams = Upstreams(specs, None)
    app = create_app(dataclasses.replace(load_settings(), api_key=CLIENT_KEY), store=DictStore({"tiny": tiny_gguf}),
                     upstreams=upstreams)
    client = TestClient(TestServer(app, host="127.0.0.1", handler_cancellation=True))
    await client.start_server()
    yield client, v1, api
    await client.close()
    for s in servers:
        await s.close()


def _url(client: TestClient) -> str:
    return str(client.make_url("")).rstrip("/")


def _assert_no_client_credentials(rec: Recorder) -> None:
    for path, headers, _ in rec.seen:
        lowered = {k.lower(): v for k, v in headers.items()}
        assert CLIENT_KEY not in json.dumps(lowered), path
        assert "x-api-key" not in lowered and "cookie" not in lowered
        if rec.api == "openai":
            assert lowered.get("authorization") == f"Bearer {UPSTREAM_KEY}"
        else:
            assert "authorization" not in lowered


async def test_ollama_client_gets_tool_calls_and_thinking_from_a_v1_upstream(front: Any) -> None:
    client, v1, _ = front
    oll = ollama.AsyncClient(host=_url(client), headers={"Authorization": f"Bearer {CLIENT_KEY}",
                                                         "x-api-key": CLIENT_KEY, "Cookie": f"s={CLIENT_KEY}"})
    reply = await oll.chat(model="gpu/big-model", messages=[{"role": "user", "content": "weather in Paris?"}],
                           tools=TOOLS, think=True, options={"temperature": 0.2, "num_predict": 64})
    assert reply.message.thinking == "Paris, so call the tool."
    assert reply.message.tool_calls and reply.message.tool_calls[0].function.name == "get_weather"
    assert reply.message.tool_calls[0].function.arguments == {"city": "Paris"}
    assert reply.prompt_eval_count == 11 and reply.eval_count == 3
    sent = v1.seen[-1][2]
    assert sent["model"] == "big-model" and sent["tools"] == TOOLS and sent["stream"] is True
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 64 and "top_p" not in sent
    streamed = [c async for c in await oll.chat(model="gpu/big-model", stream=True,
                                               messages=[{"role": "user", "content": "hello"}])]
    assert "".join(c.message.content for c in streamed) == "Hello from upstream" and streamed[-1].done
    _assert_no_client_credentials(v1)


async def test_anthropic_client_gets_a_tool_use_block(front: Any) -> None:
    client, v1, _ = front
    async with anthropic.AsyncAnthropic(base_url=_url(client), api_key=CLIENT_KEY, max_retries=0) as claude:
        tool = {"name": "get_weather", "description": "Weather in a city",
                "input_schema": TOOLS[0]["function"]["parameters"]}
        msg = await claude.messages.create(model="gpu/big-model", max_tokens=64, tools=[tool],
                                           messages=[{"role": "user", "content": "weather in Paris?"}])
        uses = [b for b in msg.content if b.type == "tool_use"]
        assert uses and uses[0].name == "get_weather" and uses[0].input == {"city": "Paris"}
        assert msg.stop_reason == "tool_use"
        async with claude.messages.stream(model="gpu/big-model", max_tokens=64,
                                          messages=[{"role": "user", "content": "hello"}]) as stream:
            text = "".join([t async for t in stream.text_stream])
        assert text == "Hello from upstream"
        _assert_no_client_credentials(v1)


async def test_openai_client_structured_output_and_completions_pass_through(front: Any) -> None:
    client, v1, _ = front
    async with openai.AsyncOpenAI(base_url=_url(client) + "/v1", api_key=CLIENT_KEY, max_retries=0) as oai:
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
        out = await oai.chat.completions.create(
            model="gpu/big-model", messages=[{"role": "user", "content": "give a"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        assert json.loads(out.choices[0].message.content or "") == {"a": 1}
        assert v1.seen[-1][2]["response_format"]["json_schema"]["schema"] == schema
        assert out.usage is not None and out.usage.prompt_tokens_details.cached_tokens == 8  # type: ignore[union-attr]
        comp = await oai.completions.create(model="gpu/big-model", prompt="Tell", max_tokens=2)
        assert comp.choices[0].text == "Once upon" and comp.choices[0].finish_reason == "length"
        resp = await oai.responses.create(model="gpu/big-model", input="hello")
        assert resp.output_text == "Hello from upstream"
        emb = await oai.embeddings.create(model="gpu/big-model", input=["a", "b"])
        assert [d.embedding for d in emb.data] == [pytest.approx([0.6, 0.8])] * 2  # float32 over base64
        models = [m.id async for m in oai.models.list()]
        assert "gpu/big-model" in models and "old/llama3:8b" in models
        with pytest.raises(openai.BadRequestError, match="logprobs are not available"):
            await oai.chat.completions.create(model="gpu/big-model", logprobs=True,
                                              messages=[{"role": "user", "content": "x"}])
        _assert_no_client_credentials(v1)


async def test_an_ollama_only_upstream_serves_the_openai_api(front: Any) -> None:
    client, _, api = front
    async with openai.AsyncOpenAI(base_url=_url(client) + "/v1", api_key=CLIENT_KEY, max_retries=0) as oai:
        stream = await oai.chat.completions.create(model="old/llama3:8b", stream=True, max_tokens=5,
                                                   messages=[{"role": "user", "content": "hi"}])
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "Hi there"
        path, _, sent = api.seen[-1]
        assert path == "/api/chat" and sent["options"] == {"num_predict": 5}
        _assert_no_client_credentials(api)


async def test_reranking_an_upstream_model_answers_in_the_same_shape_and_an_ollama_pool_says_it_cannot(
        front: Any) -> None:
    client, v1, api = front
    headers = {"Authorization": f"Bearer {CLIENT_KEY}"}
    docs = ["a much longer document than the others", "short", "mid length"]
    resp = await client.post("/v1/rerank", json={"model": "gpu/big-model", "query": "q", "top_n": 2,
                                                  "documents": [docs[0], {"text": docs[1]}, docs[2]]}, headers=headers)
    assert resp.status == 200, await resp.text()
    reply = await resp.json()
    assert reply["model"] == "gpu/big-model" and reply["usage"]["prompt_tokens"] == 21
    assert [(r["index"], r["document"]["text"]) for r in reply["results"]] == [(0, docs[0]), (2, docs[2])]
    assert reply["meta"]["warnings"] == ["document 0 was cut to fit the model's context"]
    path, _, sent = v1.seen[-1]
    assert path == "/v1/rerank" and sent["documents"] == docs and sent["model"] == "big-model"
    v2 = await (await client.post("/v2/rerank", json={"model": "gpu/big-model", "query": "q", "documents": docs},
                                  headers=headers)).json()
    assert [r["index"] for r in v2["results"]] == [0, 2, 1] and "document" not in v2["results"][0]
    refused = await client.post("/v1/rerank", json={"model": "old/llama3:8b", "query": "q", "documents": docs},
                                headers=headers)
    assert refused.status == 400
    assert "speaks Ollama's API, which has no reranking" in (await refused.json())["error"]["message"]
    assert all("rerank" not in path for path, _, _ in api.seen)  # only its health check reached it
    _assert_no_client_credentials(v1)


async def test_show_gives_an_ollama_upstreams_own_capabilities(front: Any) -> None:
    client, _, api = front
    headers = {"Authorization": f"Bearer {CLIENT_KEY}"}
    shown = await (await client.post("/api/show", json={"model": "old/llama3:8b"}, headers=headers)).json()
    assert shown["capabilities"] == ["completion", "vision", "thinking"]  # what clients enable image input by
    assert shown["details"]["family"] == "llama" and shown["details"]["families"] == ["llama"]
    assert shown["upstream"] == "old" and shown["remote_model"] == "llama3:8b"
    assert api.seen[-1][0] == "/api/show" and api.seen[-1][2] == {"model": "llama3:8b"}
    oll = ollama.AsyncClient(host=_url(client), headers=headers)
    assert (await oll.show("old/llama3:8b")).capabilities == ["completion", "vision", "thinking"]
    v1_shown = await (await client.post("/api/show", json={"model": "gpu/big-model"}, headers=headers)).json()
    assert v1_shown["capabilities"] == ["completion", "tools"]  # a /v1 server does not say: assumed
    _assert_no_client_credentials(api)


async def test_the_key_shows_nowhere(front: Any, caplog: pytest.LogCaptureFixture) -> None:
    client, _v1, _ = front
    caplog.set_level(logging.DEBUG)
    headers = {"Authorization": f"Bearer {CLIENT_KEY}"}
    await client.post("/api/chat", json={"model": "gpu/big-model", "stream": False,
                                         "messages": [{"role": "user", "content": "hi"}]}, headers=headers)
    answers = []
    for method, path, body in (("POST", "/api/show", {"model": "gpu/big-model"}), ("GET", "/api/ps", None),
                               ("GET", "/metrics", None), ("GET", "/api/tags", None), ("GET", "/api/status", None),
                               ("POST", "/api/chat",
                                {"model": "gpu/missing", "messages": [{"role": "user", "content": "x"}]})):
        resp = await client.request(method, path, json=body, headers=headers)
        answers.append(await resp.text())
    show = json.loads(answers[0])
    assert show["remote_model"] == "big-model" and show["upstream"] == "gpu"
    ps = json.loads(answers[1])["upstreams"]
    assert {(m["upstream"], m["state"]) for m in ps} == {("gpu", "healthy"), ("old", "healthy")}
    assert 'localrun_upstream_requests_total{member="' in answers[2]
    assert "not served by upstream gpu" in answers[5]
    everything = "\n".join(answers) + caplog.text
    assert UPSTREAM_KEY not in everything and "GPU_KEY" not in answers[0]
