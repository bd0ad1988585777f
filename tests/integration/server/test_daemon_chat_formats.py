"""Chat output formats through the real app and llama.cpp on tiny generated models: reasoning split
from the answer, capabilities read from the GGUF, tools refused where the template cannot render
them, and a forced tool call in the model's own format on both APIs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localrun.config import models_dir

pytestmark = pytest.mark.timeout(300)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
    "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "weather in Paris?"}]


@pytest.fixture
def store(tiny_gguf: Path, tiny_gguf_b: Path, thinking_gguf: Path) -> Any:
    from localrun.store import ModelStore

    s = ModelStore(models_dir())
    for name, path in (("tiny", tiny_gguf), ("plain", tiny_gguf_b), ("thinker", thinking_gguf)):
        s.create(name, f"FROM {path}\nPARAMETER temperature 0\nPARAMETER num_ctx 512\n")
    return s


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


async def test_capabilities_come_from_the_template_and_the_file(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    caps = {}
    for name in ("tiny", "plain", "thinker"):
        caps[name] = (await (await client.post("/api/show", json={"model": name})).json())["capabilities"]
    assert caps == {"tiny": ["completion", "tools"], "plain": ["completion"], "thinker": ["completion", "thinking"]}


async def test_reasoning_is_split_from_the_answer_and_streamed_apart(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    body = {"model": "thinker", "messages": ASK, "options": {"num_predict": 12}}
    whole = await (await client.post("/api/chat", json={**body, "stream": False})).json()
    # The template opened <think>: the tiny model's 12 random tokens are all reasoning.
    assert whole["message"]["thinking"] and whole["message"]["content"] == ""
    lines = _lines(await (await client.post("/api/chat", json=body)).text())
    streamed = "".join(x["message"].get("thinking", "") for x in lines)
    assert streamed == whole["message"]["thinking"]  # temperature 0
    assert all(x["message"]["content"] == "" for x in lines)
    # think false reaches the template (it closes the block): the same tokens are the answer now.
    off = await (await client.post("/api/chat", json={**body, "stream": False, "think": False})).json()
    assert off["message"]["content"] and "thinking" not in off["message"]
    # /v1: reasoning_content, as llama.cpp's server and vLLM name it, in its own deltas.
    chunks = _sse(await (await client.post("/v1/chat/completions", json={
        "model": "thinker", "messages": ASK, "max_tokens": 12, "stream": True})).text())
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == whole["message"]["thinking"]
    assert not "".join(d.get("content") or "" for d in deltas)
    r = await client.post("/v1/chat/completions", json={"model": "thinker", "messages": ASK, "max_tokens": 12,
                                                        "reasoning_effort": "none"})
    message = (await r.json())["choices"][0]["message"]
    assert message["content"] == off["message"]["content"] and "reasoning_content" not in message
    # /api/generate splits the same way.
    gen = await (await client.post("/api/generate", json={"model": "thinker", "prompt": "hi", "stream": False,
                                                          "options": {"num_predict": 6}})).json()
    assert gen["thinking"] and gen["response"] == ""


async def test_what_a_model_cannot_do_is_a_400_naming_it(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    r = await client.post("/api/chat", json={"model": "plain", "messages": ASK, "tools": TOOLS})
    assert r.status == 400 and (await r.json())["error"] == "plain:latest does not support tools"
    r = await client.post("/v1/chat/completions", json={"model": "plain", "messages": ASK, "tools": TOOLS})
    assert r.status == 400 and "does not support tools" in (await r.json())["error"]["message"]
    r = await client.post("/api/chat", json={"model": "tiny", "messages": ASK, "think": True})
    assert r.status == 400 and (await r.json())["error"] == "tiny:latest does not support thinking"
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "def f(", "suffix": "return x"})
    assert r.status == 400 and "does not support insert" in (await r.json())["error"]
    r = await client.post("/v1/completions", json={"model": "tiny", "prompt": "def f(", "suffix": "return x"})
    assert r.status == 400 and "does not support insert" in (await r.json())["error"]["message"]
    r = await client.post("/v1/completions", json={"model": "tiny", "prompt": "def f(", "suffix": 3})
    assert r.status == 400 and "'suffix'" in (await r.json())["error"]["message"]
    r = await client.post("/api/chat", json={"model": "tiny", "messages": ASK, "think": "very"})
    assert r.status == 400 and "'think'" in (await r.json())["error"]
    # tool_choice "none" means no tools: a model without them answers normally.
    r = await client.post("/v1/chat/completions", json={"model": "plain", "messages": ASK, "tools": TOOLS,
                                                        "tool_choice": "none", "max_tokens": 3})
    assert r.status == 200


async def test_a_forced_call_comes_back_as_a_call_on_both_apis(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    choice = {"type": "function", "function": {"name": "get_weather"}}
    body = {"model": "tiny", "messages": ASK, "tools": TOOLS, "tool_choice": choice, "max_tokens": 200}
    message = (await (await client.post("/v1/chat/completions", json=body)).json())["choices"][0]
    assert message["finish_reason"] == "tool_calls"
    call = message["message"]["tool_calls"][0]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)
    assert message["message"]["content"] is None  # the <tool_call> frame is not left in the text
    chunks = _sse(await (await client.post("/v1/chat/completions", json={**body, "stream": True})).text())
    deltas = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert len(deltas) == 1 and deltas[0]["index"] == 0 and deltas[0]["id"].startswith("call_")
    assert deltas[0]["function"]["arguments"] == call["function"]["arguments"]  # temperature 0
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    # The call goes back into the conversation with its result, rendered by the template.
    history = [*ASK, {"role": "assistant", "content": "", "tool_calls": [call]},
               {"role": "tool", "tool_call_id": call["id"], "content": "18 C, sunny"}]
    r = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": history, "tools": TOOLS,
                                                        "max_tokens": 4})
    assert r.status == 200
    r = await client.post("/api/chat", json={"model": "tiny", "stream": False, "tools": TOOLS, "messages": [
        *ASK, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                                "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "18 C"}], "options": {"num_predict": 4}})
    assert r.status == 200 and (await r.json())["done"]
