"""localrun.client's tokenize/detokenize against an injected transport: the bodies sent, errors mapped."""

from __future__ import annotations

import json

import httpx
import pytest

from localrun import errors
from localrun.client import AsyncClient, Client

SEEN: list[dict[str, object]] = []


def _handler(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    SEEN.append({"path": request.url.path, **body})
    if body["model"] == "nope":
        return httpx.Response(404, json={"error": "model 'nope' not found", "code": "model_not_found"})
    if request.url.path == "/api/tokenize":
        return httpx.Response(200, json={"model": "m:latest", "tokens": [1, 5, 6][: 3 if body["add_special"] else 2]})
    if request.url.path == "/api/detokenize":
        if any(t > 100 for t in body["tokens"]):
            return httpx.Response(400, json={"error": "token id 999 is not in the vocabulary",
                                             "code": "invalid_request"})
        return httpx.Response(200, json={"model": "m:latest", "content": "hello world"})
    return httpx.Response(404, json={"error": "not found"})


def test_sync_tokenize_and_detokenize() -> None:
    SEEN.clear()
    with Client("http://daemon", transport=httpx.MockTransport(_handler)) as c:
        assert c.tokenize("m", "hello world") == [1, 5, 6]
        assert c.tokenize("m", "hello world", add_special=False) == [1, 5]
        assert c.detokenize("m", [1, 5, 6]) == "hello world"
        with pytest.raises(errors.ModelNotFound):
            c.tokenize("nope", "x")
        with pytest.raises(errors.InvalidRequest, match="vocabulary"):
            c.detokenize("m", [999])
    assert SEEN[0] == {"path": "/api/tokenize", "model": "m", "content": "hello world", "add_special": True}
    assert SEEN[2] == {"path": "/api/detokenize", "model": "m", "tokens": [1, 5, 6]}


async def test_async_tokenize_and_detokenize() -> None:
    async with AsyncClient("http://daemon", transport=httpx.MockTransport(_handler)) as c:
        assert await c.tokenize("m", "hello world") == [1, 5, 6]
        assert await c.detokenize("m", [5, 6]) == "hello world"
        with pytest.raises(errors.ModelNotFound):
            await c.detokenize("nope", [1])
