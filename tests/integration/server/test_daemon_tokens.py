"""/api/tokenize, /api/detokenize and /v1's ignore_eos / min_tokens through the real daemon (tiny model).

Real app, real runner process, real llama.cpp. The tiny model's random weights end an output
with an end-of-generation token for some seeds; the tests search for such seeds rather than
trusting one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import DictStore

pytestmark = pytest.mark.timeout(300)

MAX = 40


@pytest.fixture
async def client(serve_app: Any, tiny_gguf: Path) -> Any:
    return await serve_app(DictStore({"tiny": tiny_gguf}), num_parallel=2)


async def _post(client: Any, path: str, body: Any) -> tuple[int, Any]:
    resp = await client.post(path, json=body) if not isinstance(body, (bytes, str)) else await client.post(
        path, data=body, headers={"Content-Type": "application/json"})
    return resp.status, await resp.json()


async def test_tokenize_and_detokenize_round_trip_and_match_what_generation_counts(client: Any) -> None:
    status, out = await _post(client, "/api/tokenize", {"model": "tiny", "content": "hello world"})
    assert status == 200 and out["model"] == "tiny:latest"
    tokens = out["tokens"]
    assert tokens[0] == 1 and len(tokens) == 3  # BOS + two words of the tiny vocabulary
    _, bare = await _post(client, "/api/tokenize", {"model": "tiny", "content": "hello world", "add_special": False})
    assert bare["tokens"] == tokens[1:]
    _, empty = await _post(client, "/api/tokenize", {"model": "tiny", "content": ""})
    assert empty["tokens"] == [1]  # what bench uses to learn the tokenizer's own overhead
    _, special = await _post(client, "/api/tokenize", {"model": "tiny", "content": "<|im_start|>user"})
    assert 3 in special["tokens"]  # special-token text becomes the special token, as in prompts

    status, back = await _post(client, "/api/detokenize", {"model": "tiny", "tokens": tokens})
    assert status == 200 and back["model"] == "tiny:latest"
    assert back["content"].strip() == "hello world"  # BOS prints nothing (SPM may lead with a space)
    _, nothing = await _post(client, "/api/detokenize", {"model": "tiny", "tokens": []})
    assert nothing["content"] == ""

    # The count is what a generation request counts for the same raw prompt.
    text = "the water of the day was long"
    _, counted = await _post(client, "/api/tokenize", {"model": "tiny", "content": text})
    _, gen = await _post(client, "/v1/completions", {"model": "tiny", "prompt": text, "max_tokens": 1})
    assert gen["usage"]["prompt_tokens"] == len(counted["tokens"])


async def test_tokenizing_reuses_a_model_loaded_with_other_options(client: Any) -> None:
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "", "options": {"num_ctx": 256}})
    assert resp.status == 200
    before = (await (await client.get("/api/ps")).json())["models"]
    status, _ = await _post(client, "/api/tokenize", {"model": "tiny", "content": "hello"})
    assert status == 200
    after = (await (await client.get("/api/ps")).json())["models"]
    assert [(m["name"], m.get("pid"), m.get("context_length")) for m in after] == \
        [(m["name"], m.get("pid"), m.get("context_length")) for m in before]


@pytest.mark.parametrize(("path", "body", "status", "words"), [
    ("/api/tokenize", {"model": "nope", "content": "hi"}, 404, "not found"),
    ("/api/tokenize", {"content": "hi"}, 400, "model"),
    ("/api/tokenize", {"model": "tiny"}, 400, "content"),
    ("/api/tokenize", {"model": "tiny", "content": 123}, 400, "content"),
    ("/api/tokenize", {"model": "tiny", "content": ["a"]}, 400, "content"),
    ("/api/tokenize", {"model": "tiny", "content": "hi", "add_special": "yes"}, 400, "add_special"),
    ("/api/tokenize", {"model": "tiny", "content": "hi", "keep_alive": "soon"}, 400, "keep_alive"),
    ("/api/tokenize", {"model": "tiny", "content": "x" * (8 * 1024 * 1024 + 1)}, 413, "at most"),
    ("/api/tokenize", "[1, 2]", 400, "object"),
    ("/api/tokenize", '{"model": "tiny", "content": "hi", "n": ' + "9" * 5000 + "}", 400, "not valid JSON"),
    ("/api/detokenize", {"model": "nope", "tokens": [1]}, 404, "not found"),
    ("/api/detokenize", {"model": "tiny"}, 400, "tokens"),
    ("/api/detokenize", {"model": "tiny", "tokens": "1 2 3"}, 400, "tokens"),
    ("/api/detokenize", {"model": "tiny", "tokens": [1, 2.5]}, 400, "whole-number"),
    ("/api/detokenize", {"model": "tiny", "tokens": [1, True]}, 400, "whole-number"),
    ("/api/detokenize", {"model": "tiny", "tokens": [1, "2"]}, 400, "whole-number"),
    ("/api/detokenize", {"model": "tiny", "tokens": [-1]}, 400, "vocabulary"),
    ("/api/detokenize", {"model": "tiny", "tokens": [1, 10**6]}, 400, "vocabulary"),
    ("/api/detokenize", {"model": "tiny", "tokens": [10**40]}, 400, "vocabulary"),
    ("/api/detokenize", {"model": "tiny", "tokens": [1] * (2 * 1024 * 1024 + 1)}, 413, "at most"),
])
async def test_bad_input_gets_a_clear_error_and_the_daemon_keeps_working(
        client: Any, path: str, body: Any, status: int, words: str) -> None:
    got, out = await _post(client, path, body)
    assert got == status, out
    assert isinstance(out.get("error"), str) and words in out["error"]
    ok, again = await _post(client, "/api/tokenize", {"model": "tiny", "content": "hello"})
    assert ok == 200 and again["tokens"]


async def _completion(client: Any, **fields: Any) -> dict[str, Any]:
    body = {"model": "tiny", "prompt": "hello world", "max_tokens": MAX, "temperature": 1.0, "top_p": 1.0,
            "top_k": 0, "repeat_penalty": 1.0, **fields}
    resp = await client.post("/v1/completions", json=body)
    assert resp.status == 200, await resp.text()
    return await resp.json()  # type: ignore[no-any-return]


async def _early_seed(client: Any, **fields: Any) -> tuple[int, int]:
    for seed in range(200):
        out = await _completion(client, seed=seed, **fields)
        if out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] < MAX - 4:
            return seed, out["usage"]["completion_tokens"]
    pytest.fail("no seed of 200 made the tiny model stop early: cannot test ignore_eos")


async def test_ignore_eos_pins_the_output_length_where_the_model_would_stop(client: Any) -> None:
    seed, early = await _early_seed(client)
    pinned = await _completion(client, seed=seed, ignore_eos=True)
    assert pinned["choices"][0]["finish_reason"] == "length"
    assert pinned["usage"]["completion_tokens"] == MAX > early
    at_least = await _completion(client, seed=seed, min_tokens=early + 3)
    assert at_least["usage"]["completion_tokens"] >= early + 3


async def test_ignore_eos_on_streamed_chat_completions(client: Any) -> None:
    async def chat(seed: int, **fields: Any) -> tuple[str | None, int]:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": MAX,
                "temperature": 1.0, "top_p": 1.0, "top_k": 0, "repeat_penalty": 1.0, "seed": seed, "stream": True,
                "stream_options": {"include_usage": True}, **fields}
        text = await (await client.post("/v1/chat/completions", json=body)).text()
        events = [json.loads(line[6:]) for line in text.splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        finish = [c["finish_reason"] for e in events for c in e.get("choices", []) if c.get("finish_reason")]
        usage = [e["usage"] for e in events if e.get("usage")]
        return (finish[-1] if finish else None), usage[-1]["completion_tokens"]

    for seed in range(200):
        finish, n = await chat(seed)
        if finish == "stop" and n < MAX - 4:
            break
    else:
        pytest.fail("no seed of 200 made the tiny model stop early in chat")
    assert await chat(seed, ignore_eos=True) == ("length", MAX)


@pytest.mark.parametrize("fields", [{"ignore_eos": "yes"}, {"min_tokens": -1}, {"min_tokens": MAX + 1}])
async def test_bad_eos_fields_are_400s(client: Any, fields: dict[str, Any]) -> None:
    resp = await client.post("/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": MAX, **fields})
    assert resp.status == 400
    assert (await resp.json())["error"]["message"]
