"""Which requests hold the calls a model opens to their tools' schemas (tool_choice auto, strict tools).

Pure: what the daemon sends the engine. That llama.cpp enforces the grammar is
tests/integration/engine/test_strict_call_grammar.py; a real model held by it, tests/e2e.
"""

from __future__ import annotations

from typing import Any

import pytest

from localrun import errors
from localrun.chat.format import ChatFormat, ToolFormat
from localrun.chat.tools import StrictCalls, forced_call, strict_calls, validate_tools
from localrun.engine.types import SamplingOptions
from localrun.server.chatturn import ChatTurn

PARAMS = {"type": "object", "properties": {"city": {"type": "string", "minLength": 1, "x-ui": "text"}},
          "required": ["city"]}


def tool(name: str, strict: bool | None) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name, "parameters": PARAMS}
    if strict is not None:
        fn["strict"] = strict
    return {"type": "function", "function": fn}


def test_only_a_strict_tool_under_auto_in_the_hermes_format_gets_a_grammar() -> None:
    both = [tool("get_weather", True), tool("shell", None)]
    assert strict_calls(both, "auto", ToolFormat.HERMES) is not None
    assert strict_calls(both, None, ToolFormat.HERMES) is not None              # auto is the default
    assert strict_calls([tool("shell", False)], "auto", ToolFormat.HERMES) is None  # costs nothing then
    assert strict_calls(both, "required", ToolFormat.HERMES) is None            # forced_call's job
    assert strict_calls(both, "auto", ToolFormat.LLAMA3) is None                # no opener in text
    assert strict_calls(both, "auto", ToolFormat.MISTRAL) is None


def test_the_call_schema_holds_a_strict_tools_arguments_and_names_every_tool() -> None:
    calls = strict_calls([tool("get_weather", True), tool("shell", False)], "auto", ToolFormat.HERMES)
    assert calls is not None
    weather, shell = calls.schema["anyOf"]
    assert weather["properties"]["name"] == {"const": "get_weather"}
    # the strict tool's parameters, minus what a grammar cannot hold ("x-ui"); the other's: any object
    assert weather["properties"]["arguments"] == {k: v for k, v in PARAMS.items() if k != "x-ui"} | {
        "properties": {"city": {"type": "string", "minLength": 1}}}
    assert shell["properties"] == {"name": {"const": "shell"}, "arguments": {"type": "object"}}
    assert "<tool_call>" not in calls.grammar  # the opener is spelled a character at a time
    assert '"</tool_call>"' in calls.grammar and "format-value" in calls.grammar


def test_a_strict_flag_that_is_not_a_boolean_is_a_400() -> None:
    assert validate_tools([tool("a", True), tool("b", False), tool("c", None)])
    with pytest.raises(errors.InvalidRequest, match=r"tools\[0\].function.strict"):
        validate_tools([{"type": "function", "function": {"name": "a", "strict": "yes"}}])


def turn(strict: StrictCalls | None, forced: Any = None) -> ChatTurn:
    return ChatTurn(prompt="p", system_prefix=None, format=ChatFormat(tools=ToolFormat.HERMES),
                    tools=frozenset({"get_weather"}), think=False, in_thinking=False, forced=forced, strict=strict)


def test_the_engine_request_carries_the_grammar_only_when_no_format_or_forced_call_wins() -> None:
    calls = strict_calls([tool("get_weather", True)], "auto", ToolFormat.HERMES)
    sampling = SamplingOptions()
    request = turn(calls).request(sampling)
    assert calls is not None and request.grammar == calls.grammar and request.format == calls.schema
    as_json = turn(calls).request(sampling, {"type": "object"})
    assert as_json.grammar is None and as_json.format == {"type": "object"}
    forced = forced_call([tool("get_weather", True)], "required", ToolFormat.HERMES)
    pinned = turn(None, forced).request(sampling)
    assert pinned.grammar is None and pinned.format_frame == ("<tool_call>\n", "\n</tool_call>")
    assert turn(None).request(sampling).grammar is None
