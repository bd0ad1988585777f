"""/v1/responses and /v1/messages through the real app and runner processes, with the official SDKs.

The runners host the fake engine, whose ``SAY:`` prompts answer a scripted line, so tool calls,
stop sequences and limits are deterministic; the official ``anthropic`` and ``openai`` async
clients talk to the app as they would to the real services. The real-engine paths (grammar,
prefix-cache counts) are in tests/e2e/test_clients.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from daemon_helpers import DictStore

pytestmark = pytest.mark.timeout(120)

CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
FN_WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
              "parameters": WEATHER["input_schema"]}


@pytest.fixture
def store(tiny_gguf: Path, thinking_gguf: Path) -> DictStore:
    return DictStore({"fake": tiny_gguf, "thinker": thinking_gguf})


@pytest.fixture
async def app(serve_app: Any, store: DictStore, fake_runners: Any) -> Any:
    return await serve_app(store, load_fn=fake_runners)


def _url(app: Any) -> str:
    return str(app.make_url("")).rstrip("/")


# The SDK clients are closed in the test's own loop: left to the garbage collector, their aclose() ran on a
# later test's loop and logged "Event loop is closed" tracebacks there (failing its no-traceback check).
@pytest.fixture
async def claude(app: Any) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=_url(app), api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture
async def oai(app: Any) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=_url(app) + "/v1", api_key="unused", max_retries=0) as client:
        yield client


def _user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def _sse(response: Any) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs of a named-event SSE body."""
    events, name = [], None
    for line in (await response.text()).splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[6:])))
    return events


# --- Anthropic Messages -----------------------------------------------------------------------


async def test_anthropic_create_answers_with_text_and_usage(claude: anthropic.AsyncAnthropic) -> None:
    m = await claude.messages.create(model="fake", max_tokens=100, system="You are terse.",
                                     messages=_user("SAY:The capital of France is Paris."),
                                     metadata={"user_id": "u1"},
                                     # sampling fields newer SDKs no longer type, which older clients still send:
                                     extra_body={"temperature": 0.2, "top_p": 0.9, "top_k": 20})
    assert m.type == "message" and m.role == "assistant" and m.model == "fake:latest"
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == "The capital of France is Paris."
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    assert m.usage.input_tokens > 0 and m.usage.output_tokens == 11 and m.usage.cache_read_input_tokens == 0


async def test_anthropic_stream_gives_the_same_text_and_the_documented_events(
        claude: anthropic.AsyncAnthropic, app: Any) -> None:
    async with claude.messages.stream(model="fake", max_tokens=100, messages=_user("SAY:Hello there")) as stream:
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(pieces) == "Hello there" == final.content[0].text and len(pieces) > 1
    assert final.stop_reason == "end_turn"
    r = await app.post("/v1/messages", json={"model": "fake", "max_tokens": 100, "stream": True,
                                             "messages": _user("SAY:Hi")}, headers={"anthropic-version": "2023-06-01"})
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    names = [name for name, _ in await _sse(r)]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
                     "message_delta", "message_stop"]


async def test_anthropic_tool_use_created_streamed_and_answered(claude: anthropic.AsyncAnthropic, app: Any) -> None:
    m = await claude.messages.create(model="fake", max_tokens=200, tools=[WEATHER],  # type: ignore[list-item]
                                     messages=_user(f"SAY:{CALL}"))
    assert m.stop_reason == "tool_use" and [b.type for b in m.content] == ["tool_use"]
    call = m.content[0]
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "Paris"}
    assert call.id.startswith("toolu_")
    async with claude.messages.stream(model="fake", max_tokens=200, tools=[WEATHER],  # type: ignore[list-item]
                                      tool_choice={"type": "any"}, messages=_user(f"SAY:{CALL}")) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].input == {"city": "Paris"}  # type: ignore[union-attr]
    r = await app.post("/v1/messages", json={"model": "fake", "max_tokens": 200, "stream": True, "tools": [WEATHER],
                                             "messages": _user(f"SAY:{CALL}")})
    deltas = [d["delta"] for n, d in await _sse(r) if n == "content_block_delta"]
    assert deltas == [{"type": "input_json_delta", "partial_json": json.dumps({"city": "Paris"})}]
    # The result goes back as a tool_result block; the model reads it (the fake says what it read).
    answer = await claude.messages.create(model="fake", max_tokens=100, tools=[WEATHER], messages=[  # type: ignore[list-item]
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": "SAY:It is sunny in Paris."}]}])
    assert answer.content[0].text == "It is sunny in Paris." and answer.stop_reason == "end_turn"  # type: ignore[union-attr]


async def test_anthropic_tool_choice_none_gives_plain_text(claude: anthropic.AsyncAnthropic) -> None:
    m = await claude.messages.create(model="fake", max_tokens=200, tools=[WEATHER],  # type: ignore[list-item]
                                     tool_choice={"type": "none"}, messages=_user(f"SAY:{CALL}"))
    assert m.stop_reason == "end_turn" and m.content[0].text == CALL  # type: ignore[union-attr]


async def test_anthropic_stop_reasons(claude: anthropic.AsyncAnthropic) -> None:
    m = await claude.messages.create(model="fake", max_tokens=100, stop_sequences=["STOP", "END"],
                                     messages=_user("SAY:one two STOP three"))
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "STOP" and m.content[0].text == "one two "  # type: ignore[union-attr]
    m = await claude.messages.create(model="fake", max_tokens=2, messages=_user("SAY:a long answer here"))
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 2


async def test_anthropic_count_tokens_counts_system_and_messages(claude: anthropic.AsyncAnthropic) -> None:
    bare = await claude.messages.count_tokens(model="fake", messages=_user("hello"))
    more = await claude.messages.count_tokens(model="fake", messages=_user("hello"), system="You are a pirate.",
                                              tools=[WEATHER])  # type: ignore[list-item]
    assert 0 < bare.input_tokens < more.input_tokens
    assert (await claude.messages.count_tokens(model="fake", messages=_user("hello"))).input_tokens == bare.input_tokens


async def test_anthropic_errors_have_anthropics_shape(claude: anthropic.AsyncAnthropic, app: Any) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        await claude.messages.create(model="nothing-here", max_tokens=5, messages=_user("hi"))
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as bad:
        await claude.messages.create(model="fake", max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
    assert "not a valid PNG image" in str(bad.value)  # checked before anything decodes it
    r = await app.post("/v1/messages", json={"model": "fake", "messages": _user("hi")})
    assert r.status == 400
    assert await r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                         "message": "max_tokens: field required"}}
    r = await app.post("/v1/messages", data=b"{not json")
    body = await r.json()
    assert r.status == 400 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"


async def test_x_api_key_is_accepted_like_a_bearer_key(serve_app: Any, store: DictStore, fake_runners: Any) -> None:
    app = await serve_app(store, load_fn=fake_runners, api_key="s3cret")
    async with anthropic.AsyncAnthropic(base_url=_url(app), api_key="s3cret", max_retries=0) as good:  # x-api-key
        m = await good.messages.create(model="fake", max_tokens=20, messages=_user("SAY:ok"),
                                       extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"})
    assert m.content[0].text == "ok"  # type: ignore[union-attr]
    async with anthropic.AsyncAnthropic(base_url=_url(app), api_key="wrong", max_retries=0) as bad:
        with pytest.raises(anthropic.AuthenticationError) as info:
            await bad.messages.create(model="fake", max_tokens=20, messages=_user("SAY:ok"))
    assert info.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    r = await app.get("/api/tags", headers={"x-api-key": "s3cret"})
    assert r.status == 200
    r = await app.get("/api/tags", headers={"x-api-key": "nope"})
    assert r.status == 401


async def test_anthropic_thinking_blocks_from_a_thinking_model(claude: anthropic.AsyncAnthropic) -> None:
    said = "SAY:France's capital city.</think>Paris."  # the prompt opened <think>: reasoning comes first
    m = await claude.messages.create(model="thinker", max_tokens=2000, messages=_user(said),
                                     thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == "France's capital city." and m.content[1].text == "Paris."  # type: ignore[union-attr]
    async with claude.messages.stream(model="thinker", max_tokens=2000, messages=_user(said),
                                      thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        kinds = [e.delta.type async for e in stream if e.type == "content_block_delta"]
        final = await stream.get_final_message()
    assert "thinking_delta" in kinds and kinds[-1] == "text_delta"
    assert [b.type for b in final.content] == ["thinking", "text"]
    off = await claude.messages.create(model="thinker", max_tokens=100, messages=_user("SAY:Paris."),
                                       thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"] and off.content[0].text == "Paris."  # type: ignore[union-attr]
    with pytest.raises(anthropic.BadRequestError) as info:  # as Ollama answers: the model cannot think
        await claude.messages.create(model="fake", max_tokens=2000, messages=_user("SAY:x"),
                                     thinking={"type": "enabled", "budget_tokens": 1024})
    assert "does not support thinking" in str(info.value)


# --- OpenAI Responses -------------------------------------------------------------------------


async def test_responses_create_plain(oai: openai.AsyncOpenAI) -> None:
    r = await oai.responses.create(model="fake", input="SAY:Paris.", instructions="Answer briefly.",
                                   max_output_tokens=50, temperature=0.1, store=False)
    assert r.object == "response" and r.status == "completed" and r.output_text == "Paris."
    assert r.id.startswith("resp_") and r.output[0].type == "message" and r.model == "fake:latest"
    assert r.usage is not None and r.usage.output_tokens == 2 and r.usage.input_tokens_details.cached_tokens == 0
    assert r.instructions == "Answer briefly." and r.max_output_tokens == 50


async def test_responses_stream_events_and_sequence_numbers(oai: openai.AsyncOpenAI) -> None:
    async with oai.responses.stream(model="fake", input="SAY:Streaming works fine") as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    assert final.output_text == "Streaming works fine"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Streaming works fine"


async def test_responses_function_tool_call_and_its_output(oai: openai.AsyncOpenAI) -> None:
    r = await oai.responses.create(model="fake", input=f"SAY:{CALL}", tools=[FN_WEATHER])  # type: ignore[list-item]
    assert [o.type for o in r.output] == ["function_call"]
    call = r.output[0]
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == {"city": "Paris"}
    stream = await oai.responses.create(model="fake", input=f"SAY:{CALL}", tools=[FN_WEATHER],  # type: ignore[list-item]
                                        tool_choice={"type": "function", "name": "get_weather"}, stream=True)
    kinds = [e.type async for e in stream]
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    follow = await oai.responses.create(model="fake", tools=[FN_WEATHER], input=[  # type: ignore[list-item]
        {"role": "user", "content": "weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "SAY:Sunny, 24 degrees."}])
    assert follow.output_text == "Sunny, 24 degrees."


async def test_responses_json_schema_request_is_accepted(oai: openai.AsyncOpenAI) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    r = await oai.responses.create(model="fake", input='SAY:{"n": 3}',
                                   text={"format": {"type": "json_schema", "name": "n", "schema": schema,
                                                    "strict": True}})
    assert json.loads(r.output_text) == {"n": 3} and r.text is not None and r.text.format.type == "json_schema"


async def test_responses_reasoning_item_from_a_thinking_model(oai: openai.AsyncOpenAI) -> None:
    said = "SAY:France's capital city.</think>Paris."
    r = await oai.responses.create(model="thinker", input=said, reasoning={"effort": "low"})
    assert [o.type for o in r.output] == ["reasoning", "message"] and r.output_text == "Paris."
    reasoning = r.output[0]
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert reasoning.content[0].text == "France's capital city."
    async with oai.responses.stream(model="thinker", input=said) as stream:
        kinds = [e.type async for e in stream]
        final = await stream.get_final_response()
    assert "response.reasoning_text.delta" in kinds and final.output_text == "Paris."
    plain = await oai.responses.create(model="thinker", input="SAY:Paris.", reasoning={"effort": "none"})
    assert [o.type for o in plain.output] == ["message"]


async def test_responses_continue_a_stored_response_and_read_it_back(oai: openai.AsyncOpenAI) -> None:
    """OpenAI's own conversation-state example: the second request sends only its new input."""
    first = await oai.responses.create(model="fake", input="SAY:Paris.", instructions="Answer briefly.")
    assert first.store is True and first.previous_response_id is None
    second = await oai.responses.create(model="fake", input="SAY:Lyon.", previous_response_id=first.id)
    assert second.output_text == "Lyon." and second.previous_response_id == first.id
    assert second.instructions is None  # not carried over, as OpenAI documents
    alone = await oai.responses.create(model="fake", input="SAY:Lyon.", store=False)
    assert second.usage is not None and alone.usage is not None
    assert second.usage.input_tokens > alone.usage.input_tokens  # it read the first turn too
    again = await oai.responses.retrieve(second.id)
    assert again.id == second.id and again.output_text == "Lyon." and again.status == "completed"
    items = await oai.responses.input_items.list(second.id, order="asc")
    assert [(i.type, getattr(i, "role", None)) for i in items.data] == [
        ("message", "user"), ("message", "assistant"), ("message", "user")]
    assert [i.content[0].text for i in items.data if i.type == "message"] == ["SAY:Paris.", "Paris.", "SAY:Lyon."]
    newest = await oai.responses.input_items.list(second.id, limit=1)
    assert newest.has_more and newest.data[0].id == items.data[-1].id
    async with oai.responses.stream(model="fake", input="SAY:Nice.", previous_response_id=second.id) as stream:
        third = await stream.get_final_response()
    assert third.output_text == "Nice." and (await oai.responses.retrieve(third.id)).output_text == "Nice."
    await oai.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        await oai.responses.retrieve(first.id)
    fourth = await oai.responses.create(model="fake", input="SAY:Still here.", previous_response_id=second.id)
    assert fourth.output_text == "Still here."  # a continuation keeps its own context


async def test_responses_store_false_keeps_nothing_and_tool_results_continue_a_call(oai: openai.AsyncOpenAI) -> None:
    unstored = await oai.responses.create(model="fake", input="SAY:Gone.", store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        await oai.responses.retrieve(unstored.id)
    with pytest.raises(openai.BadRequestError) as info:
        await oai.responses.create(model="fake", input="more", previous_response_id=unstored.id)
    assert info.value.code == "previous_response_not_found"
    asked = await oai.responses.create(model="fake", input=f"SAY:{CALL}", tools=[FN_WEATHER])  # type: ignore[list-item]
    call = asked.output[0]
    assert call.type == "function_call"
    answered = await oai.responses.create(model="fake", tools=[FN_WEATHER],  # type: ignore[list-item]
                                          previous_response_id=asked.id, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "SAY:Sunny, 24 degrees."}])
    assert answered.output_text == "Sunny, 24 degrees."
    referenced = await oai.responses.create(model="fake", tools=[FN_WEATHER], input=[  # type: ignore[list-item]
        {"role": "user", "content": "weather in Paris?"}, {"type": "item_reference", "id": call.id},
        {"type": "function_call_output", "call_id": call.call_id, "output": "SAY:Rainy."}])
    assert referenced.output_text == "Rainy."
    with pytest.raises(openai.BadRequestError) as info:
        await oai.responses.cancel(asked.id)
    assert "background" in info.value.message


async def _until_ended(oai: openai.AsyncOpenAI, response_id: str) -> Any:
    for _ in range(500):
        polled = await oai.responses.retrieve(response_id)
        if polled.status not in ("queued", "in_progress"):
            return polled
        await asyncio.sleep(0.02)
    raise AssertionError(f"{response_id} still {polled.status}")


async def test_background_responses_are_polled_resumed_and_cancelled(oai: openai.AsyncOpenAI) -> None:
    """OpenAI's background mode, as its SDK examples use it (responses/background*.py)."""
    queued = await oai.responses.create(model="fake", input="SAY:Done in the background.", background=True)
    assert queued.status == "queued" and queued.background is True and queued.output == []
    ended = await _until_ended(oai, queued.id)
    assert ended.status == "completed" and ended.output_text == "Done in the background."
    # a stream the client leaves goes on; the rest is read again from a sequence number
    seen = []
    async with await oai.responses.create(model="fake", input="SAY:" + "word " * 20, background=True,
                                          stream=True) as stream:
        async for event in stream:
            seen.append(event)
            if event.sequence_number == 5:
                break
    first = seen[0].response.id
    assert seen[0].type == "response.created" and seen[0].response.status == "queued"
    rest = [e async for e in await oai.responses.retrieve(first, stream=True, starting_after=5)]
    assert [e.sequence_number for e in rest] == list(range(6, 6 + len(rest)))
    assert rest[-1].type == "response.completed"
    text = "".join(e.delta for e in seen + rest if e.type == "response.output_text.delta")
    assert text.strip() == ("word " * 20).strip() and text == (await oai.responses.retrieve(first)).output_text
    # a long one: read while it runs, then cancelled (again: no change), and its text so far kept
    slow = await oai.responses.create(model="fake", input="SLOW", background=True, max_output_tokens=5000)
    for _ in range(200):
        running = await oai.responses.retrieve(slow.id)
        if running.status == "in_progress" and running.output_text:
            break
        await asyncio.sleep(0.02)
    assert running.status == "in_progress" and running.output_text
    cancelled = await oai.responses.cancel(slow.id)
    assert cancelled.status == "cancelled" and cancelled.output_text.startswith(running.output_text)
    assert (await oai.responses.cancel(slow.id)).status == "cancelled"
    assert (await oai.responses.retrieve(slow.id)).status == "cancelled"
    # deleting a running one cancels it first
    doomed = await oai.responses.create(model="fake", input="SLOW", background=True)
    await oai.responses.delete(doomed.id)
    with pytest.raises(openai.NotFoundError):
        await oai.responses.retrieve(doomed.id)
    with pytest.raises(openai.BadRequestError) as info:
        await oai.responses.create(model="fake", input="x", background=True, store=False)
    assert "must be stored" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        await oai.responses.retrieve(ended.id, stream=True, starting_after=-3)
    assert "starting_after" in info.value.message


async def test_responses_limit_unknown_previous_response_and_bad_input(oai: openai.AsyncOpenAI) -> None:
    r = await oai.responses.create(model="fake", input="SAY:a long answer here", max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    with pytest.raises(openai.BadRequestError) as info:
        await oai.responses.create(model="fake", input="hi", previous_response_id="resp_123")
    assert info.value.code == "previous_response_not_found" and info.value.param == "previous_response_id"
    assert "Previous response with id 'resp_123' not found" in info.value.message
    with pytest.raises(openai.BadRequestError):
        await oai.responses.create(model="fake", input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"}]}])
    with pytest.raises(openai.NotFoundError):
        await oai.responses.create(model="nothing-here", input="hi")
