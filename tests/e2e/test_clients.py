"""The official ``ollama``, ``openai`` and ``anthropic`` Python packages, unchanged, against a real ``localrun serve``.

One daemon per module (a subprocess on a free loopback port, its own model store), the tiny
random-weight model imported through the clients themselves (create_blob + create). Output text
is random; the tests check what a client sees: shapes, streaming, counts, errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from ports import free_port
from servedaemon import Daemon

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MODEL = "tiny:latest"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[str]:
    home = tmp_path_factory.mktemp("daemon")
    live = Daemon(home, free_port(), {"LOCALRUN_MODELS": str(home / "models"), "LOCALRUN_NUM_PARALLEL": "2"})
    try:
        client = ollama.Client(host=live.url)
        digest = client.create_blob(tiny_gguf)
        client.create(model="tiny", files={"tiny.gguf": digest}, parameters={"num_ctx": 512, "temperature": 0.0})
        yield live.url
    finally:
        live.stop()


@pytest.fixture
def oll(daemon: str) -> ollama.Client:
    return ollama.Client(host=daemon)


@pytest.fixture
def oai(daemon: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=daemon + "/v1", api_key="unused", max_retries=0)


# --- ollama -----------------------------------------------------------------------------------


def test_ollama_list_show_ps(oll: ollama.Client) -> None:
    names = [m.model for m in oll.list().models]
    assert MODEL in names
    shown = oll.show(MODEL)
    assert "FROM" in (shown.modelfile or "") and shown.details is not None
    assert "num_ctx" in (shown.parameters or "")
    oll.generate(model=MODEL, prompt="")  # an empty prompt loads the model
    running = {m.model: m for m in oll.ps().models}
    assert MODEL in running and running[MODEL].size and running[MODEL].context_length == 512


def test_ollama_generate_streaming_and_not(oll: ollama.Client) -> None:
    r = oll.generate(model=MODEL, prompt="hello world", options={"num_predict": 8})
    assert r.done and r.done_reason == "length" and r.eval_count == 8
    assert r.prompt_eval_count and r.total_duration and r.total_duration >= (r.eval_duration or 0)
    assert r.context
    chunks = list(oll.generate(model=MODEL, prompt="hello world", options={"num_predict": 8}, stream=True))
    assert chunks[-1].done and sum(1 for c in chunks if not c.done) >= 1
    assert "".join(c.response for c in chunks) == r.response  # temperature 0 from the Modelfile
    # The same prompt again: served from the prefix cache (a localrun field the ollama models drop).
    raw = httpx.post(oll._client.base_url.join("/api/generate"), json={
        "model": MODEL, "prompt": "hello world", "stream": False, "options": {"num_predict": 2}}).json()
    assert raw["prompt_eval_cached_count"] > 0 and raw["prompt_eval_count"] >= raw["prompt_eval_cached_count"]


def test_ollama_chat_streaming_and_not(oll: ollama.Client) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = oll.chat(model=MODEL, messages=messages, options={"num_predict": 6})
    assert r.message.role == "assistant" and r.done and r.eval_count == 6
    parts = list(oll.chat(model=MODEL, messages=messages, options={"num_predict": 6}, stream=True))
    assert parts[-1].done and "".join(p.message.content or "" for p in parts) == r.message.content


def test_ollama_chat_with_tools_and_format(oll: ollama.Client) -> None:
    r = oll.chat(model=MODEL, messages=[{"role": "user", "content": "weather in Paris?"}], tools=TOOLS,
                 options={"num_predict": 12})
    assert r.done
    r = oll.generate(model=MODEL, prompt="json please", format="json", options={"num_predict": 40})
    if r.done_reason == "stop":
        json.loads(r.response)


def test_ollama_embed_and_embeddings(oll: ollama.Client) -> None:
    r = oll.embed(model=MODEL, input=["hello world", "the cat"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == 64
    assert abs(sum(v * v for v in r.embeddings[0]) - 1.0) < 1e-3
    single = oll.embeddings(model=MODEL, prompt="hello world")
    assert len(single.embedding) == 64


def test_ollama_copy_delete_and_errors(oll: ollama.Client) -> None:
    oll.copy(MODEL, "tiny-copy")
    assert "tiny-copy:latest" in [m.model for m in oll.list().models]
    oll.delete("tiny-copy")
    assert "tiny-copy:latest" not in [m.model for m in oll.list().models]
    with pytest.raises(ollama.ResponseError) as info:
        oll.generate(model="nothing-here", prompt="x")
    assert info.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as info:
        oll.delete("nothing-here")
    assert info.value.status_code == 404


@pytest.mark.starter
def test_ollama_pull_streams_progress(oll: ollama.Client, gemma_gguf: Path) -> None:
    statuses = [p.status for p in oll.pull("gemma3:270m", stream=True)]
    assert statuses[-1] == "success"
    assert "gemma3:270m" in [m.model for m in oll.list().models]
    assert oll.pull("gemma3:270m").status == "success"  # present already: nothing to download


def test_ollama_create_streams_progress_and_uses_parameters(oll: ollama.Client, tiny_gguf: Path) -> None:
    digest = oll.create_blob(tiny_gguf)
    parts = list(oll.create(model="tiny-sys", files={"tiny.gguf": digest}, system="You are terse.",
                            parameters={"num_predict": 3}, stream=True))
    assert parts[-1].status == "success"
    shown = oll.show("tiny-sys")
    assert "num_predict" in (shown.parameters or "") and "You are terse." in (shown.modelfile or "")
    assert oll.generate(model="tiny-sys", prompt="hi").eval_count == 3  # the Modelfile default applies
    oll.delete("tiny-sys")


def test_ollama_create_quantizes_on_the_way(oll: ollama.Client, tiny_gguf: Path) -> None:
    digest = oll.create_blob(tiny_gguf)
    statuses = [p.status for p in oll.create(model="tiny-q8", files={"tiny.gguf": digest}, quantize="q8_0",
                                             stream=True)]
    assert "quantizing F32 model to Q8_0" in statuses and statuses[-1] == "success"
    shown = oll.show("tiny-q8")
    assert shown.details is not None and shown.details.quantization_level == "Q8_0"
    assert oll.generate(model="tiny-q8", prompt="hi", options={"num_predict": 3}).eval_count == 3
    with pytest.raises(ollama.ResponseError) as info:
        oll.create(model="tiny-q4", from_="tiny-q8", quantize="q4_K_M")
    assert info.value.status_code == 400 and "needs unquantized weights" in info.value.error
    oll.delete("tiny-q8")


async def test_ollama_async_client(daemon: str) -> None:
    client = ollama.AsyncClient(host=daemon)
    parts = [p async for p in await client.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                options={"num_predict": 3}, stream=True)]
    assert parts[-1].done and parts[-1].eval_count == 3
    assert MODEL in [m.model for m in (await client.ps()).models]


# --- openai -----------------------------------------------------------------------------------


def test_openai_models(oai: openai.OpenAI) -> None:
    ids = [m.id for m in oai.models.list()]
    assert MODEL in ids
    assert oai.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("nothing-here")


def test_openai_chat_completions(oai: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "hello"}]
    r = oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, seed=1, n=2, logprobs=True,
                                    top_logprobs=2)
    assert len(r.choices) == 2 and r.choices[0].finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 10
    assert r.choices[0].logprobs is not None and len(r.choices[0].logprobs.content or []) == 5
    stream = oai.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=5, stream=True,
                                         stream_options={"include_usage": True}, stop=["\n\n"])
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 5
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)


def test_openai_json_modes_and_forced_tool_call(oai: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    r = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a number"}], max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content or "")["n"], int)
    r = oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "weather in Paris?"}], tools=TOOLS,  # type: ignore[arg-type]
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=80)
    choice = r.choices[0]
    if choice.finish_reason != "length":
        assert choice.finish_reason == "tool_calls"
        call = (choice.message.tool_calls or [])[0]
        assert call.function.name == "get_weather"
        assert isinstance(json.loads(call.function.arguments)["city"], str)


def test_openai_completions_and_embeddings(oai: openai.OpenAI) -> None:
    r = oai.completions.create(model=MODEL, prompt="once upon", max_tokens=4, echo=True)
    assert r.choices[0].text.startswith("once upon") and r.usage and r.usage.completion_tokens == 4
    parts = list(oai.completions.create(model=MODEL, prompt="once upon", max_tokens=4, stream=True))
    assert parts[-1].choices[0].finish_reason == "length"
    e = oai.embeddings.create(model=MODEL, input=["a cat", "a dog"])  # the SDK asks for base64
    assert len(e.data) == 2 and len(e.data[0].embedding) == 64
    e = oai.embeddings.create(model=MODEL, input="a cat", encoding_format="float", dimensions=16)
    assert len(e.data[0].embedding) == 16


def test_openai_errors_have_openai_shape(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="nothing-here", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                    temperature="hot")  # type: ignore[arg-type]
    assert "temperature" in str(info.value)


async def test_openai_async_client_streams(daemon: str) -> None:
    client = openai.AsyncOpenAI(base_url=daemon + "/v1", api_key="unused", max_retries=0)
    stream = await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                  max_tokens=3, stream=True)
    chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "length"
    await client.close()


# --- openai: the Responses API ------------------------------------------------------------------


def test_openai_responses_plain_and_streamed(oai: openai.OpenAI) -> None:
    prompt = "Tell me a long story about a cat who lives by the sea and keeps a lighthouse"
    r = oai.responses.create(model=MODEL, input=prompt, instructions="be brief", max_output_tokens=6, store=False)
    assert r.status == "incomplete" and r.incomplete_details and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text and r.usage is not None and r.usage.output_tokens == 6
    events = list(oai.responses.create(model=MODEL, input=prompt, instructions="be brief", max_output_tokens=6,
                                       stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.incomplete"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == r.output_text  # temperature 0 from the Modelfile
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.input_tokens == r.usage.input_tokens
    # (prefix-cache counts: tests/integration/server/test_daemon_gaps.py, on a fresh daemon whose cache
    # cannot have been cleared by earlier tests' traffic)


def test_openai_responses_continue_a_stored_response(oai: openai.OpenAI) -> None:
    """OpenAI's conversation-state example on the real engine: the second request sends only its new
    input, the model reads the first turn too, and that turn comes from the prefix cache."""
    first = oai.responses.create(model=MODEL, input="Name a colour.", max_output_tokens=8)
    second = oai.responses.create(model=MODEL, previous_response_id=first.id, input="Name another one.",
                                  max_output_tokens=8)
    assert second.previous_response_id == first.id and second.output_text
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens // 2
    listed = oai.responses.input_items.list(second.id, order="asc")
    assert [getattr(i, "role", None) for i in listed.data] == ["user", "assistant", "user"]


def test_openai_responses_json_schema_and_forced_function_call(oai: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    r = oai.responses.create(model=MODEL, input="a number", max_output_tokens=60,
                             text={"format": {"type": "json_schema", "name": "n", "schema": schema, "strict": True}})
    if r.status == "completed":  # the grammar closes the JSON unless the limit came first
        assert isinstance(json.loads(r.output_text)["n"], int)
    tool = {"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}
    r = oai.responses.create(model=MODEL, input="weather in Paris?", tools=[tool],  # type: ignore[list-item]
                             tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=80)
    if r.status == "completed":
        (call,) = r.output
        assert call.type == "function_call" and call.name == "get_weather"
        assert isinstance(json.loads(call.arguments)["city"], str)


# --- anthropic: the Messages API ---------------------------------------------------------------


@pytest.fixture
def claude(daemon: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=daemon, api_key="unused", max_retries=0)


def test_anthropic_create_stream_and_count_tokens(claude: anthropic.Anthropic) -> None:
    messages: Any = [{"role": "user", "content": "Write about the sea, the wind and a boat that sails at night"}]
    m = claude.messages.create(model=MODEL, max_tokens=5, system="You are a poet.", messages=messages)
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 5 and m.content[0].type == "text"
    with claude.messages.stream(model=MODEL, max_tokens=5, system="You are a poet.", messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == m.content[0].text  # type: ignore[union-attr]
    counted = claude.messages.count_tokens(model=MODEL, system="You are a poet.", messages=messages)
    assert counted.input_tokens == final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)


def test_anthropic_models_list_and_retrieve(claude: anthropic.Anthropic) -> None:
    listed = {m.id: m for m in claude.models.list()}
    assert listed[MODEL].type == "model" and listed[MODEL].display_name == MODEL
    assert listed[MODEL].created_at.year >= 2026 and (listed[MODEL].max_input_tokens or 0) > 0
    assert claude.models.retrieve(MODEL).id == MODEL
    with pytest.raises(anthropic.NotFoundError):
        claude.models.retrieve("no-such-model")


def test_anthropic_forced_tool_and_structured_output(claude: anthropic.Anthropic) -> None:
    tool: Any = {"name": "get_weather", "description": "Weather in a city",
                 "input_schema": TOOLS[0]["function"]["parameters"]}
    m = claude.messages.create(model=MODEL, max_tokens=80, tools=[tool],
                               tool_choice={"type": "tool", "name": "get_weather"},
                               messages=[{"role": "user", "content": "weather in Paris?"}])
    if m.stop_reason != "max_tokens":
        assert m.stop_reason == "tool_use"
        (call,) = m.content
        assert call.type == "tool_use" and call.name == "get_weather" and isinstance(call.input["city"], str)  # type: ignore[index]
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    m = claude.messages.create(model=MODEL, max_tokens=60, messages=[{"role": "user", "content": "a number"}],
                               output_config={"format": {"type": "json_schema", "schema": schema}})
    if m.stop_reason == "end_turn":
        assert isinstance(json.loads(m.content[0].text)["n"], int)  # type: ignore[union-attr]
