"""Safe defaults and bad input: API key, Host header, CORS, body limit, malformed requests (never a 500)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import DictStore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def store(tiny_gguf: Path) -> DictStore:
    return DictStore({"a": tiny_gguf})


async def test_api_key_is_required_everywhere_but_root_and_health(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners, api_key="s3cret")
    assert (await client.get("/")).status == 200
    assert (await client.get("/health")).status == 200
    for method, path in (("GET", "/api/ps"), ("GET", "/api/version"), ("GET", "/metrics"),
                         ("POST", "/api/generate"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
        r = await client.request(method, path)
        assert r.status == 401, path
    r = await client.post("/v1/chat/completions", json={})
    assert (await r.json())["error"]["type"] == "authentication_error"
    r = await client.get("/api/ps", headers={"Authorization": "Bearer wrong"})
    assert r.status == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    r = await client.get("/api/ps", headers={"Authorization": "Bearer s3cret"})
    assert r.status == 200


async def test_foreign_host_headers_are_refused_on_loopback(serve_app: Any, store: DictStore) -> None:
    client = await serve_app(store)
    r = await client.get("/api/version", headers={"Host": "evil.example:11435"})
    assert r.status == 403 and "Host" in (await r.json())["error"]
    import socket

    for host in ("localhost:11435", "127.0.0.1", "[::1]:11435", "app.localhost", f"{socket.gethostname()}:11435"):
        assert (await client.get("/api/version", headers={"Host": host})).status == 200, host


async def test_cors_allows_localhost_and_configured_origins_only(serve_app: Any, store: DictStore) -> None:
    client = await serve_app(store, origins=("https://app.example",))
    r = await client.get("/api/version", headers={"Origin": "http://localhost:5173"})
    assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    r = await client.get("/api/version", headers={"Origin": "https://app.example"})
    assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
    r = await client.post("/api/delete", headers={"Origin": "https://evil.example"}, json={"model": "a"})
    assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers
    r = await client.options("/v1/chat/completions", headers={
        "Origin": "http://127.0.0.1:3000", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status == 204
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert r.headers["Access-Control-Allow-Origin"] == "http://127.0.0.1:3000"
    # Error responses carry CORS headers too, so a local web app can show the message.
    r = await client.post("/api/generate", headers={"Origin": "http://localhost"},
                          json={"model": "nope", "prompt": "x"})
    assert r.status == 404 and r.headers["Access-Control-Allow-Origin"] == "http://localhost"


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/api/generate", b"{not json", 400, "not valid JSON"),
        ("/api/generate", b'{"model": "a", "prompt": "x", "options": {"mirostat_tau": NaN}}', 400, "NaN is not"),
        ("/api/chat", b'{"model": "a", "messages": [], "options": {"temperature": -Infinity}}', 400, "-Infinity"),
        ("/api/generate", b"[1, 2]", 400, "JSON object"),
        ("/api/generate", b'{"model": "a", "prompt": 5}', 400, "'prompt' must be a string"),
        ("/api/generate", b'{"model": "a", "prompt": "x", "stream": "yes"}', 400, "'stream'"),
        ("/api/generate", b'{"model": "a", "prompt": "x", "options": [1]}', 400, "'options' must be an object"),
        ("/api/generate", b'{"model": "a", "prompt": "x", "options": {"num_ctx": "big"}}', 400, "num_ctx"),
        ("/api/generate", b'{"model": "a", "prompt": "x", "options": {"top_p": 7}}', 400, "top_p"),
        ("/api/generate", b'{"model": "a", "prompt": "x", "format": 3}', 400, "format"),
        ("/api/generate", b'{"model": "a", "prompt": "x", "context": ["a"]}', 400, "context"),
        ("/api/generate", b'{"prompt": "x"}', 400, "'model' is required"),
        ("/api/generate", b'{"model": "missing", "prompt": "x"}', 404, "not found"),
        ("/api/chat", b'{"model": "a", "messages": "hi"}', 400, "'messages' must be a list"),
        ("/api/chat", b'{"model": "a", "messages": [{"role": "wizard", "content": "x"}]}', 400, "role"),
        ("/api/chat", b'{"model": "a", "messages": [{"role": "user", "content": 1}]}', 400, "content"),
        ("/api/chat", b'{"model": "a", "messages": [{"role": "user", "content": "x"}], "tools": {}}', 400, "tools"),
        ("/api/embed", b'{"model": "a", "input": 5}', 400, "'input'"),
        ("/api/embed", b'{"model": "a", "input": ["x"], "dimensions": 0}', 400, "dimensions"),
    ],
)
async def test_bad_native_requests_get_a_4xx_with_a_message(
    serve_app: Any, store: DictStore, fake_runners: Any, path: str, body: bytes, status: int, needle: str
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    r = await client.post(path, data=body, headers={"Content-Type": "application/json"})
    assert r.status == status
    message = (await r.json())["error"]
    assert needle in message


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/v1/chat/completions", {"model": "a", "messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"model": "a", "messages": [{"role": "user", "content": "x"}], "n": 99}, 400, "'n'"),
        ("/v1/chat/completions", {"model": "a", "messages": [{"role": "user", "content": "x"}],
                                  "temperature": "hot"}, 400, "temperature"),
        ("/v1/chat/completions", {"model": "a", "messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "yaml"}}, 400, "response_format"),
        ("/v1/chat/completions", {"model": "a", "messages": [{"role": "user", "content": "x"}],
                                  "tool_choice": "required"}, 400, "tools"),
        ("/v1/chat/completions", {"model": "a", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, 400, "image_url"),
        ("/v1/chat/completions", {"model": "gone", "messages": [{"role": "user", "content": "x"}]}, 404, "not found"),
        ("/v1/completions", {"model": "a", "prompt": 3}, 400, "prompt"),
        ("/v1/completions", {"model": "a", "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/embeddings", {"model": "a", "input": [[1, -2]]}, 400, "token ids"),
        ("/v1/embeddings", {"model": "a", "input": "x", "encoding_format": "hex"}, 400, "encoding_format"),
    ],
)
async def test_bad_openai_requests_get_openai_errors(
    serve_app: Any, store: DictStore, fake_runners: Any, path: str, body: dict[str, Any], status: int, needle: str
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    r = await client.post(path, json=body)
    assert r.status == status
    error = (await r.json())["error"]
    assert needle in error["message"] and error["type"] == "invalid_request_error"


async def test_engine_option_errors_are_400_not_500(serve_app: Any, store: DictStore, fake_runners: Any) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    r = await client.post("/api/generate", json={"model": "a", "prompt": "x", "options": {"temperature": 1000}})
    assert r.status == 400 and "temperature" in (await r.json())["error"]


async def test_oversized_bodies_unknown_routes_and_methods(serve_app: Any, store: DictStore) -> None:
    client = await serve_app(store)
    r = await client.post("/api/generate", data=b"x" * (65 * 1024 * 1024))
    assert r.status == 413 and "too large" in (await r.json())["error"]
    r = await client.get("/api/nothing")
    assert r.status == 404 and "error" in await r.json()
    r = await client.get("/api/generate")
    assert r.status == 405 and "error" in await r.json()
    r = await client.get("/v1/nothing")
    assert r.status == 404 and (await r.json())["error"]["message"]
