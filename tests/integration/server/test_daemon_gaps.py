"""Small compatibility gaps, through the real app: /api/ps digests, token-array embeddings, cancels as 499,
and the prefix-cache counts the Responses and Messages APIs report."""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import DictStore

from localrun.config import models_dir

pytestmark = pytest.mark.timeout(120)


async def _wait_idle(client: Any, name: str) -> None:
    for _ in range(400):
        models = {m["name"]: m for m in (await (await client.get("/api/ps")).json())["models"]}
        if models.get(name, {}).get("active") == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never became idle")


async def test_ps_digests_are_bare_hex_like_tags(serve_app: Any, tiny_gguf: Path, fake_runners: Any) -> None:
    client = await serve_app(DictStore({"a": tiny_gguf}), load_fn=fake_runners)
    await client.post("/api/generate", json={"model": "a", "prompt": "x", "stream": False})
    (entry,) = (await (await client.get("/api/ps")).json())["models"]
    assert entry["digest"] == "0123456789abcdef0123"  # the store's "sha256:0123..." without the prefix


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/responses"])
async def test_a_request_the_client_cancels_counts_as_499_not_500(
        serve_app: Any, tiny_gguf: Path, fake_runners: Any, caplog: pytest.LogCaptureFixture, path: str) -> None:
    client = await serve_app(DictStore({"a": tiny_gguf}), load_fn=fake_runners)
    body: dict[str, Any] = {"model": "a", "stream": True, "messages": [{"role": "user", "content": "SLOW"}],
                            "max_tokens": 10000}
    if path == "/v1/responses":
        body = {"model": "a", "stream": True, "input": "SLOW"}
    caplog.set_level(logging.INFO, logger="localrun")
    response = await client.post(path, json=body)
    assert response.status == 200
    await response.content.readline()  # streaming has begun
    response.close()  # Esc in the chat, Ctrl+C in a script
    await _wait_idle(client, "a:latest")
    metrics = await (await client.get("/metrics")).text()
    assert f'localrun_requests_total{{endpoint="{path}",status="499"}} 1.0' in metrics
    assert 'status="500"' not in metrics
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith(f"request endpoint={path} "))
    assert "status=cancelled" in line and "Traceback" not in caplog.text


@pytest.fixture
def store(tiny_gguf: Path) -> Any:
    from localrun.store import ModelStore

    s = ModelStore(models_dir())
    s.create("tiny", f"FROM {tiny_gguf}\nPARAMETER num_ctx 512\n")
    return s


async def test_token_array_embeddings_match_the_text_they_encode(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    tokens = (await (await client.post("/api/tokenize", json={"model": "tiny", "content": "hello world"})).json())[
        "tokens"]
    text = (await (await client.post("/v1/embeddings", json={
        "model": "tiny", "input": "hello world", "encoding_format": "float"})).json())["data"][0]["embedding"]
    r = await client.post("/v1/embeddings", json={"model": "tiny", "input": tokens, "encoding_format": "float"})
    assert r.status == 200
    one = (await r.json())["data"]
    assert len(one) == 1
    assert all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(one[0]["embedding"], text, strict=False))
    r = await client.post("/v1/embeddings", json={"model": "tiny", "input": [tokens, tokens[:2]],
                                                  "encoding_format": "float"})
    body = await r.json()
    assert [d["index"] for d in body["data"]] == [0, 1] and body["usage"]["prompt_tokens"] == len(tokens) + 2
    r = await client.post("/v1/embeddings", json={"model": "tiny", "input": [[1, 2], [5, 10_000_000]]})
    assert r.status == 400
    error = (await r.json())["error"]
    assert "10000000" in error["message"] and "vocabulary" in error["message"]
    assert error["type"] == "invalid_request_error"


async def test_prefix_cache_hits_are_reported_in_each_apis_usage(serve_app: Any, store: Any) -> None:
    """The same prompt twice: the second is read from the prefix cache, and each API says so its own way."""
    client = await serve_app(store)
    body = {"model": "tiny", "max_tokens": 4, "system": "You are a poet.",
            "messages": [{"role": "user", "content": "Write about the sea and a boat that sails at night"}]}
    first = (await (await client.post("/v1/messages", json=body)).json())["usage"]
    second = (await (await client.post("/v1/messages", json=body)).json())["usage"]
    prompt = first["input_tokens"] + first["cache_read_input_tokens"]
    assert second["cache_read_input_tokens"] > 0
    assert second["input_tokens"] + second["cache_read_input_tokens"] == prompt
    assert second["input_tokens"] < first["input_tokens"] and second["cache_creation_input_tokens"] == 0
    counted = await (await client.post("/v1/messages/count_tokens", json=body)).json()
    assert counted["input_tokens"] == prompt
    request = {"model": "tiny", "instructions": "You are a poet.", "max_output_tokens": 4,
               "input": "Write about the wind and a boat that sails at dawn"}
    await client.post("/v1/responses", json=request)
    usage = (await (await client.post("/v1/responses", json=request)).json())["usage"]
    assert 0 < usage["input_tokens_details"]["cached_tokens"] < usage["input_tokens"]
