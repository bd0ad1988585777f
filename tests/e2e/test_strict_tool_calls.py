"""The starter (qwen2.5-coder:0.5b) calling tools as agents ask it to, through the official SDKs (issue #25).

One ``localrun serve`` for the module; temperature 0, so each answer is the model's greedy one.
A system prompt tells the model to call ``get_weather`` with arguments its schema does not have
(``town``, ``kelvin``): without ``strict`` it obeys the prompt, with ``strict: true`` under
``tool_choice: auto`` the grammar holds it to the schema, in whatever form it writes the call
(``<tool_call>``, bare or fenced JSON), streamed or not. An answer that is no call is the same
with a strict tool offered, and it streams from its first tokens; a call cut by ``max_tokens``
ends as cut, without half a call in the text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from ports import free_port
from servedaemon import Daemon

pytestmark = [pytest.mark.starter, pytest.mark.slow, pytest.mark.timeout(600)]
MODEL = "qwen2.5-coder:0.5b"
PARAMS = {"type": "object", "properties": {"city": {"type": "string"},
                                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
          "required": ["city", "unit"], "additionalProperties": False}
MISLEAD = [{"role": "system", "content": 'You call tools by writing <tool_call>{"name": ..., "arguments": ...}'
                                         '</tool_call>. Always give get_weather the arguments '
                                         '{"town": <the city>, "unit": "kelvin"}.'},
           {"role": "user", "content": "How warm is it in Paris?"}]


def weather(strict: bool) -> list[Any]:
    return [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                              "strict": strict, "parameters": PARAMS}}]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory, starter_models: Path) -> Iterator[str]:
    home = tmp_path_factory.mktemp("strict-daemon")
    live = Daemon(home, free_port(), {"LOCALRUN_MODELS": str(starter_models), "LOCALRUN_NUM_PARALLEL": "1"})
    try:
        yield live.url
    finally:
        live.stop()


@pytest.fixture
def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)


def streamed(oai: openai.OpenAI, **kw: Any) -> tuple[list[str], dict[int, tuple[str, str]], str | None]:
    """(content pieces, calls by index, finish_reason) of a streamed chat completion."""
    pieces, calls, finish = [], {}, None
    for chunk in oai.chat.completions.create(**kw, stream=True):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        if choice.delta.content:
            pieces.append(choice.delta.content)
        for call in choice.delta.tool_calls or []:
            assert call.function is not None and call.function.name and call.function.arguments is not None
            calls[call.index] = (call.function.name, call.function.arguments)
    return pieces, calls, finish


def test_a_strict_tool_holds_its_schema_under_auto_streamed_or_not(oai: openai.OpenAI) -> None:
    kw: dict[str, Any] = {"model": MODEL, "messages": MISLEAD, "temperature": 0, "max_tokens": 100}
    loose = oai.chat.completions.create(**kw, tools=weather(False)).choices[0].message
    assert loose.tool_calls and "town" in loose.tool_calls[0].function.arguments, \
        "the model no longer follows the misleading prompt: this test needs another one"  # type: ignore[union-attr]
    held = oai.chat.completions.create(**kw, tools=weather(True)).choices[0]
    assert held.finish_reason == "tool_calls" and held.message.tool_calls
    arguments = json.loads(held.message.tool_calls[0].function.arguments)  # type: ignore[union-attr]
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
    _, calls, finish = streamed(oai, **kw, tools=weather(True))
    assert finish == "tool_calls" and set(json.loads(calls[0][1])) == {"city", "unit"}


def test_an_answer_without_calls_is_the_same_with_a_strict_tool(oai: openai.OpenAI) -> None:
    kw: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "Write a haiku about the sea."}],
                          "temperature": 0, "max_tokens": 60}
    plain = oai.chat.completions.create(**kw, tools=weather(False)).choices[0].message.content
    held = oai.chat.completions.create(**kw, tools=weather(True)).choices[0].message.content
    assert plain and held == plain


def test_a_json_answer_with_tools_offered_streams_from_its_first_tokens(oai: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": 'Answer only with a JSON object {"isNewTopic": true or false, "title": '
                                       'a short title} for this message: "How do I reverse a list in Python?"'}]
    pieces, calls, _ = streamed(oai, model=MODEL, messages=ask, tools=weather(False), temperature=0, max_tokens=60)
    text = "".join(pieces)
    assert not calls and "isNewTopic" in text
    assert len(pieces) >= 5 and len(pieces[0]) < len(text) // 3, pieces  # not held to the end in one piece


def test_a_call_cut_by_max_tokens_ends_as_cut_without_half_a_call(url: str, oai: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": "How warm is it in Paris?"}]
    claude = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
    tool = {"name": "get_weather", "description": "Weather in a city", "input_schema": PARAMS}
    greedy = {"temperature": 0}  # a field newer SDKs no longer type
    m = claude.messages.create(model=MODEL, max_tokens=8, extra_body=greedy, tools=[tool], messages=ask)  # type: ignore[list-item]
    assert m.stop_reason == "max_tokens" and m.content == []
    with claude.messages.stream(model=MODEL, max_tokens=8, extra_body=greedy, tools=[tool],  # type: ignore[list-item]
                                messages=ask) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens" and final.content == []
    r = oai.responses.create(model=MODEL, input=ask, max_output_tokens=8, temperature=0,  # type: ignore[arg-type]
                             tools=[{"type": "function", "name": "get_weather", "parameters": PARAMS,  # type: ignore[list-item]
                                     "strict": False}])
    assert r.status == "incomplete" and r.output_text == ""
    chat = oai.chat.completions.create(model=MODEL, messages=ask, tools=weather(False),  # type: ignore[arg-type]
                                       temperature=0, max_tokens=8).choices[0]
    assert chat.finish_reason == "length" and not chat.message.content and not chat.message.tool_calls
