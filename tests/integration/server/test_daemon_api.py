"""Both APIs through the real app, real runner processes and real llama.cpp (tiny model; starter where it matters)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from localrun.config import models_dir

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def store(tiny_gguf: Path) -> Any:
    from localrun.store import ModelStore

    s = ModelStore(models_dir())
    s.create("tiny", f"FROM {tiny_gguf}\nPARAMETER temperature 0\nPARAMETER num_ctx 512\n")
    return s


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _sse(text: str) -> list[Any]:
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def test_generate_stream_ends_with_timings_and_cache_counts(serve_app: Any, store: Any) -> None:
    client = await serve_app(store, num_parallel=2)
    body = {"model": "tiny", "prompt": "the cat and the dog", "options": {"num_predict": 6}}
    lines = _lines(await (await client.post("/api/generate", json=body)).text())
    final = lines[-1]
    assert all(not x["done"] for x in lines[:-1]) and final["done"] and final["done_reason"] == "length"
    assert final["eval_count"] == 6 and final["prompt_eval_count"] > 0 and final["load_duration"] > 0
    for key in ("total_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(final[key], int) and final[key] > 0
    assert final["total_duration"] >= final["load_duration"]
    assert final["context"] and "prompt_eval_cached_count" in final
    again = await (await client.post("/api/generate", json={**body, "stream": False})).json()
    assert again["response"] == "".join(x["response"] for x in lines)  # temperature 0 (Modelfile)
    assert again["prompt_eval_cached_count"] > 0 and again["load_duration"] == 0
    follow = await (await client.post("/api/generate", json={
        "model": "tiny", "prompt": "and more", "context": again["context"], "stream": False,
        "options": {"num_predict": 2}})).json()
    assert follow["prompt_eval_count"] > len(again["context"])


async def test_chat_applies_the_template_and_json_format_validates(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    r = await client.post("/api/chat", json={
        "model": "tiny", "stream": False, "options": {"num_predict": 5},
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]})
    body = await r.json()
    assert r.status == 200 and body["message"]["role"] == "assistant" and body["eval_count"] == 5
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = await client.post("/api/chat", json={
        "model": "tiny", "stream": False, "format": schema, "options": {"num_predict": 60},
        "messages": [{"role": "user", "content": "answer in JSON"}]})
    body = await r.json()
    if body["done_reason"] == "stop":
        jsonschema.validate(json.loads(body["message"]["content"]), schema)
    r = await client.post("/api/chat", json={
        "model": "tiny", "messages": [{"role": "user", "content": "x"}],
        "format": {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 3}}}})
    assert r.status == 400 and "multipleOf" in (await r.json())["error"]


async def test_openai_streaming_usage_n_and_forced_tool_call(serve_app: Any, store: Any) -> None:
    client = await serve_app(store, num_parallel=4)
    r = await client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True, "n": 2,
        "max_tokens": 4, "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 2})
    chunks = _sse(await r.text())
    finishes = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks
                if c["choices"] and c["choices"][0]["finish_reason"]}
    assert finishes == {0: "length", 1: "length"}
    assert chunks[-1]["usage"]["completion_tokens"] == 8 and chunks[-1]["choices"] == []
    with_lp = [c for c in chunks if c["choices"] and c["choices"][0]["logprobs"]]
    assert with_lp and len(with_lp[0]["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 2
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
        "additionalProperties": False}}}]
    for stream in (False, True):
        r = await client.post("/v1/chat/completions", json={
            "model": "tiny", "messages": [{"role": "user", "content": "weather?"}], "tools": tools,
            "tool_choice": "required", "max_tokens": 120, "stream": stream})
        assert r.status == 200
        if stream:
            calls = [tc for c in _sse(await r.text()) if c["choices"]
                     for tc in c["choices"][0]["delta"].get("tool_calls", [])]
        else:
            message = (await r.json())["choices"][0]["message"]
            calls = message.get("tool_calls") or []
        if calls:  # the grammar closes the JSON unless max_tokens ran out first
            args = json.loads(calls[0]["function"]["arguments"])
            assert calls[0]["function"]["name"] == "get_weather" and isinstance(args["city"], str)


async def test_completions_and_embeddings(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    r = await client.post("/v1/completions", json={"model": "tiny", "prompt": ["a", "b c"], "max_tokens": 3,
                                                   "logprobs": 1})
    body = await r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1] and body["usage"]["completion_tokens"] == 6
    assert len(body["choices"][0]["logprobs"]["tokens"]) == 3
    r = await client.post("/api/embed", json={"model": "tiny", "input": ["hello world", "the dog"]})
    body = await r.json()
    assert len(body["embeddings"]) == 2 and body["prompt_eval_count"] > 0
    r = await client.post("/v1/embeddings", json={"model": "tiny", "input": "hello", "dimensions": 8})
    assert len((await r.json())["data"][0]["embedding"]) == 8


async def test_a_killed_real_runner_fails_its_stream_and_the_next_request_reloads(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "x", "stream": False,
                                                 "options": {"num_predict": 1}})
    pid = (await (await client.get("/api/ps")).json())["models"][0]["pid"]
    stream = await client.post("/api/generate", json={"model": "tiny", "prompt": "go on",
                                                      "options": {"num_predict": 100000, "num_ctx": 512}})
    await stream.content.readline()
    os.kill(pid, signal.SIGKILL)
    lines = _lines(await stream.text())
    assert lines and ("error" in lines[-1] or lines[-1].get("done"))  # killed mid-stream, or it had finished
    await asyncio.sleep(0)
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "x", "stream": False,
                                                 "options": {"num_predict": 1, "num_ctx": 512}})
    assert r.status == 200
    assert (await (await client.get("/api/ps")).json())["models"][0]["pid"] != pid


@pytest.mark.starter
@pytest.mark.slow
async def test_starter_chat_uses_gemma_turns_and_stops(serve_app: Any, store: Any, gemma_gguf: Path) -> None:
    client = await serve_app(store, num_parallel=2)
    r = await client.post("/api/chat", json={
        "model": "gemma3:270m", "stream": False, "options": {"num_predict": 48, "temperature": 0},
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}]})
    body = await r.json()
    assert r.status == 200, body
    text = body["message"]["content"]
    assert text.strip() and "<start_of_turn>" not in text and "<end_of_turn>" not in text
    r = await client.post("/v1/chat/completions", json={
        "model": "gemma3:270m", "max_tokens": 64, "response_format": {"type": "json_object"},
        "messages": [{"role": "user", "content": "Give a JSON object with a key 'greeting'."}]})
    choice = (await r.json())["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"]), dict)
    ps = (await (await client.get("/api/ps")).json())["models"]
    assert ps[0]["name"] == "gemma3:270m" and ps[0]["processor"] == "100% CPU"


async def test_long_prompts_are_cut_from_the_front_unless_truncate_is_false(serve_app: Any, store: Any) -> None:
    client = await serve_app(store, num_parallel=1)
    long = "hello world " * 600  # well past num_ctx 512
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": long, "stream": False,
                                                 "options": {"num_predict": 2}})
    body = await r.json()
    assert r.status == 200 and body["prompt_truncated_count"] > 0 and body["prompt_eval_count"] <= 512
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": long, "truncate": False})
    assert r.status == 400 and (await r.json())["code"] == "context_length_exceeded"
    r = await client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": [{"role": "user", "content": long}], "truncate": False})
    assert r.status == 400 and (await r.json())["error"]["code"] == "context_length_exceeded"
