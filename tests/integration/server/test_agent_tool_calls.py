"""Tool calls as coding agents see them, through the real app, runner processes and the official SDKs.

Scripted replies (the fake engine's ``SAY:`` prompts, 3 characters a token, ``max_tokens``
honoured) check what a cut call ends with on each API and how soon a reply that is no call
streams; the tiny model on llama.cpp checks that a strict tool's grammar (tool_choice auto)
reaches the engine and leaves an answer without calls alone. A real model held by that grammar
is tests/e2e/test_strict_tool_calls.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from daemon_helpers import DictStore

pytestmark = pytest.mark.timeout(180)

PARIS = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
LONDON = PARIS.replace("Paris", "London")
# 3 characters a token: the limit falls inside the second call's JSON.
CUT_IN_SECOND = (len(PARIS) + 20) // 3
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}
FN = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": PARAMS}}
RESPONSES_FN = {"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": PARAMS}
CLAUDE_TOOL = {"name": "get_weather", "description": "Weather in a city", "input_schema": PARAMS}


@pytest.fixture
async def app(serve_app: Any, tiny_gguf: Path, fake_runners: Any) -> Any:
    return await serve_app(DictStore({"fake": tiny_gguf}), load_fn=fake_runners)


def _url(app: Any) -> str:
    return str(app.make_url("")).rstrip("/")


@pytest.fixture
async def oai(app: Any) -> AsyncIterator[openai.AsyncOpenAI]:
    # closed here, in the test's loop: left to the garbage collector, its aclose() was scheduled on a
    # later test's loop and logged "Event loop is closed" tracebacks there
    async with openai.AsyncOpenAI(base_url=_url(app) + "/v1", api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture
async def claude(app: Any) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=_url(app), api_key="unused", max_retries=0) as client:
        yield client


def _say(text: str) -> list[Any]:
    return [{"role": "user", "content": f"SAY:{text}"}]


# --- a call cut by max_tokens -----------------------------------------------------------------


async def test_anthropic_a_second_call_cut_by_max_tokens_is_max_tokens_without_leaking(
        claude: anthropic.AsyncAnthropic) -> None:
    kw: dict[str, Any] = {"model": "fake", "max_tokens": CUT_IN_SECOND, "tools": [CLAUDE_TOOL],
                          "messages": _say(PARIS + LONDON)}
    m = await claude.messages.create(**kw)
    assert m.stop_reason == "max_tokens"
    assert [b.type for b in m.content] == ["tool_use"] and m.content[0].input == {"city": "Paris"}  # type: ignore[union-attr]
    async with claude.messages.stream(**kw) as stream:
        streamed = await stream.get_final_message()
    assert streamed.stop_reason == "max_tokens" and [b.type for b in streamed.content] == ["tool_use"]


async def test_anthropic_a_whole_call_still_says_tool_use(claude: anthropic.AsyncAnthropic) -> None:
    m = await claude.messages.create(model="fake", max_tokens=200, tools=[CLAUDE_TOOL], messages=_say(PARIS))  # type: ignore[list-item]
    assert m.stop_reason == "tool_use"


async def test_responses_a_second_call_cut_is_incomplete_and_leaks_no_text(oai: openai.AsyncOpenAI) -> None:
    r = await oai.responses.create(model="fake", input=_say(PARIS + LONDON), tools=[RESPONSES_FN],  # type: ignore[list-item]
                                   max_output_tokens=CUT_IN_SECOND)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert [o.type for o in r.output] == ["function_call"] and r.output_text == ""


async def test_chat_a_second_call_cut_leaks_no_text(oai: openai.AsyncOpenAI) -> None:
    kw: dict[str, Any] = {"model": "fake", "messages": _say(PARIS + LONDON), "tools": [FN], "max_tokens": CUT_IN_SECOND}
    r = await oai.chat.completions.create(**kw)
    message = r.choices[0].message
    assert message.content is None and [c.function.name for c in message.tool_calls or []] == ["get_weather"]
    stream = await oai.chat.completions.create(**kw, stream=True)
    text = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    assert text == []


async def test_chat_a_second_call_cut_by_max_tokens_is_length(oai: openai.AsyncOpenAI) -> None:
    kw: dict[str, Any] = {"model": "fake", "messages": _say(PARIS + LONDON), "tools": [FN], "max_tokens": CUT_IN_SECOND}
    r = await oai.chat.completions.create(**kw)
    assert r.choices[0].finish_reason == "length"
    stream = await oai.chat.completions.create(**kw, stream=True)
    assert [c.choices[0].finish_reason async for c in stream if c.choices][-1] == "length"


async def test_chat_a_first_call_cut_is_length_with_no_call_and_no_text(oai: openai.AsyncOpenAI) -> None:
    r = await oai.chat.completions.create(model="fake", messages=_say(PARIS), tools=[FN], max_tokens=8)  # type: ignore[list-item]
    choice = r.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls and not choice.message.content


# --- a reply that is no call streams at once ----------------------------------------------------


async def test_a_json_answer_that_is_no_call_streams_from_its_first_tokens(oai: openai.AsyncOpenAI) -> None:
    """Claude Code's topic check answers JSON; with tools offered it used to arrive in one piece at the end."""
    answer = '{"isNewTopic": true, "title": "Weather in Paris and London today"}'
    stream = await oai.chat.completions.create(model="fake", messages=_say(answer), tools=[FN], stream=True)  # type: ignore[list-item]
    pieces = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == answer
    assert len(pieces) >= len(answer) // 3 - 2 and len(pieces[0]) <= 6  # token by token from the start


async def test_anthropic_text_streams_token_by_token_with_tools_offered(claude: anthropic.AsyncAnthropic) -> None:
    answer = "Sure, here is the plan for today."
    async with claude.messages.stream(model="fake", max_tokens=100, tools=[CLAUDE_TOOL],  # type: ignore[list-item]
                                      messages=_say(answer)) as stream:
        pieces = [t async for t in stream.text_stream]
    assert "".join(pieces) == answer and len(pieces) >= len(answer) // 3 - 1


# --- strict tools under tool_choice auto, on llama.cpp ----------------------------------------------


@pytest.fixture
async def tiny(serve_app: Any, tiny_gguf: Path) -> Any:
    from localrun.config import models_dir
    from localrun.store import ModelStore

    store = ModelStore(models_dir())
    store.create("tiny", f"FROM {tiny_gguf}\nPARAMETER temperature 0\nPARAMETER num_ctx 512\n")
    return await serve_app(store)


async def test_a_strict_tool_under_auto_gets_an_answer_streamed_or_not(tiny: Any) -> None:
    strict = {"type": "function", "function": {**FN["function"], "strict": True}}  # type: ignore[dict-item]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "weather in Paris?"}], "tools": [strict],
            "tool_choice": "auto", "max_tokens": 24}
    r = await tiny.post("/v1/chat/completions", json=body)
    assert r.status == 200, await r.text()
    choice = (await r.json())["choices"][0]
    assert choice["finish_reason"] in ("stop", "length", "tool_calls")
    streamed = await tiny.post("/v1/chat/completions", json={**body, "stream": True})
    assert streamed.status == 200 and "data: [DONE]" in await streamed.text()
    # a strict tool whose schema a grammar cannot hold is refused as under "required", before generating
    bad = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "abc"}}}}}
    r = await tiny.post("/v1/chat/completions", json={**body, "tools": [bad]})
    assert r.status == 400 and "pattern" in json.dumps(await r.json())
