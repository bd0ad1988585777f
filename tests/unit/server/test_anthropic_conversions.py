"""Anthropic Messages API: request conversion and the event stream, as pure functions (no model, no server)."""

from __future__ import annotations

from typing import Any

import pytest

from localrun.errors import InvalidRequest
from localrun.server.anthropic.convert import Thinking, messages_to_native
from localrun.server.anthropic.stream import MessageEncoder, stop_reason
from localrun.server.chat import TokenUsage

WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def _native(**body: Any) -> Any:
    return messages_to_native({"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}],
                               **body})


def test_sampling_fields_become_options() -> None:
    m = _native(temperature=0.2, top_p=0.9, top_k=20, stop_sequences=["END"], metadata={"user_id": "u"},
                stream=True)
    assert m.call.options == {"temperature": 0.2, "top_p": 0.9, "top_k": 20, "stop": ["END"], "num_predict": 50}
    assert m.stop_sequences == ("END",) and m.call.stream and m.thinking == Thinking(None) and m.call.think is None


def test_system_blocks_tool_use_and_tool_results_become_a_chat_history() -> None:
    m = _native(system=[{"type": "text", "text": "You help.", "cache_control": {"type": "ephemeral"}}],
                tools=[WEATHER], messages=[
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
            {"type": "text", "text": "and tomorrow?"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "boom",
                                      "is_error": True}]},
    ])
    assert m.call.messages == [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "toolu_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "toolu_1", "tool_name": "get_weather"},
        {"role": "user", "content": "and tomorrow?"},
        {"role": "tool", "content": "Error: boom", "tool_call_id": "toolu_9"},
    ]
    assert m.call.tools == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["input_schema"], "description": "Weather in a city"}}]


@pytest.mark.parametrize(("choice", "native"), [
    ({"type": "auto"}, "auto"), ({"type": "none"}, "none"), ({"type": "any"}, "required"),
    ({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
     {"type": "function", "function": {"name": "get_weather"}}),
])
def test_tool_choice_maps_to_the_chat_form(choice: Any, native: Any) -> None:
    assert _native(tools=[WEATHER], tool_choice=choice).call.tool_choice == native


def test_thinking_is_read_and_checked() -> None:
    enabled = _native(max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 2048})
    assert enabled.thinking == Thinking(True, 2048) and enabled.call.think is True
    effort = _native(max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 2048},
                     output_config={"effort": "max"})
    assert effort.call.think == "high"  # the level reaches the template (gpt-oss's reasoning_effort)
    adaptive = _native(thinking={"type": "adaptive"}, output_config={"effort": "high"})  # Claude Code's pair
    assert adaptive.call.think is None  # the model's own default: a model that cannot think still answers
    assert _native(thinking={"type": "disabled"}).call.think is False
    assert _native(thinking={"type": "adaptive"}).call.think is None  # the model's own default


def test_output_config_format_is_the_native_format() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert _native(output_config={"format": {"type": "json_schema", "schema": schema}, "effort": "low"}) \
        .call.format == schema
    assert _native(output_config={"effort": "high"}).call.format is None


def test_system_turns_mid_conversation_are_system_messages() -> None:
    """Claude Code sends them (the mid-conversation-system beta): a list of agents, skills..."""
    m = _native(messages=[{"role": "user", "content": "hi"},
                          {"role": "system", "content": [{"type": "text", "text": "Agents: a, b"}]},
                          {"role": "system", "content": "more"}])
    assert m.call.messages == [{"role": "user", "content": "hi"}, {"role": "system", "content": "Agents: a, b"},
                               {"role": "system", "content": "more"}]


def test_count_tokens_needs_no_max_tokens() -> None:
    m = messages_to_native({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, count_only=True)
    assert "num_predict" not in m.call.options


@pytest.mark.parametrize(("body", "words"), [
    ({"max_tokens": None}, "max_tokens: field required"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": "9"}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "role"),
    ({"messages": [{"role": "system", "content": [{"type": "image", "source": {}}]}]}, "system blocks"),
    ({"messages": [{"role": "user", "content": 5}]}, "content"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "source"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url",
                                                                              "url": "https://x/cat.png"}}]}]},
     "does not fetch images"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "documents"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     "assistant"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]}, "id"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}, "tool_use_id"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                 "content": [{"type": "image", "source": {}}]}]}]}, "source"),
    ({"messages": [{"role": "user", "content": [{"type": "video"}]}]}, "unsupported"),
    ({"system": 5}, "system"),
    ({"system": [{"type": "image"}]}, "system"),
    ({"temperature": 1.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": -0.1}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"stop_sequences": "END"}, "stop_sequences"),
    ({"stop_sequences": [""]}, "stop_sequences"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "server tools"),
    ({"tools": [{"name": "f"}]}, "input_schema"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ({"tool_choice": {"type": "tool"}}, "tool_choice"),
    ({"thinking": {"type": "enabled"}}, "budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "less than max_tokens"),
    ({"metadata": "x"}, "metadata"),
    ({"output_config": {"format": {"type": "json_schema"}}}, "output_config.format"),
    ({"output_config": {"effort": "huge"}}, "effort"),
    ({"stream": "yes"}, "stream"),
    # unhashable values where a type or role name goes (the fuzzer found this shape on /v1/responses)
    ({"messages": [{"role": ["user"], "content": "x"}]}, "role"),
    ({"messages": [{"role": "user", "content": [{"type": [[], {}], "text": "x"}]}]}, "unsupported"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                 "content": [{"type": {"a": 1}}]}]}]}, "text and image blocks"),
    ({"tools": [{"type": ["custom"], "name": "f", "input_schema": {}}]}, "server tools"),
    ({"tool_choice": {"type": ["any"]}}, "tool_choice"),
    ({"thinking": {"type": {"enabled": 1}}}, "thinking"),
])
def test_bad_requests_are_invalid_request_errors_naming_the_field(body: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        _native(**body)


@pytest.mark.parametrize(("calls", "limit", "matched", "expected"), [
    (True, False, None, ("tool_use", None)),
    (True, True, None, ("max_tokens", None)),  # cut after a call: the model was still writing (issue #25)
    (False, True, None, ("max_tokens", None)),
    (False, False, "END", ("stop_sequence", "END")),
    (False, False, "<|im_end|>", ("end_turn", None)),  # a Modelfile stop, not one the request asked for
    (False, False, None, ("end_turn", None)),
])
def test_stop_reason(calls: bool, limit: bool, matched: str | None, expected: tuple[str, str | None]) -> None:
    assert stop_reason(calls, limit, matched, ("END",)) == expected


def test_a_streamed_reply_has_anthropics_event_sequence() -> None:
    encoder = MessageEncoder("m:latest")
    events = encoder.start(20) + encoder.text("Let") + encoder.text(" me") \
        + encoder.tool_use("toolu_1", "get_weather", '{"city": "Paris"}', {"city": "Paris"}) \
        + encoder.finish(TokenUsage(prompt=20, cached=15, output=9), False, None, ())
    assert [name for name, _ in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]
    assert all(name == data["type"] for name, data in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] == 20
    assert events[2][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert events[6][1]["content_block"] == {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    assert events[7][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'}
    assert [d["index"] for n, d in events if n.startswith("content_block")] == [0, 0, 0, 0, 1, 1, 1]
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"] == {"input_tokens": 5, "output_tokens": 9, "cache_creation_input_tokens": 0,
                              "cache_read_input_tokens": 15}
    assert encoder.message["content"] == [{"type": "text", "text": "Let me"},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]
    assert encoder.message["stop_reason"] == "tool_use"


def test_thinking_comes_first_in_its_own_block() -> None:
    encoder = MessageEncoder("m")
    events = encoder.start(3) + encoder.thinking("Paris is ") + encoder.thinking("in France.") \
        + encoder.text("Paris.") + encoder.finish(TokenUsage(3, 0, 9), False, None, ())
    assert [n for n, _ in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]
    assert events[2][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert events[3][1]["delta"] == {"type": "thinking_delta", "thinking": "Paris is "}
    assert encoder.message["content"] == [{"type": "thinking", "thinking": "Paris is in France.", "signature": ""},
                                          {"type": "text", "text": "Paris."}]


def test_an_empty_reply_still_ends_properly() -> None:
    encoder = MessageEncoder("m")
    events = encoder.start(3) + encoder.text("") + encoder.finish(TokenUsage(3, 0, 1), False, None, ())
    assert [n for n, _ in events] == ["message_start", "ping", "message_delta", "message_stop"]
    assert encoder.message["content"] == [] and encoder.message["stop_reason"] == "end_turn"


def test_a_strict_tool_stays_strict_and_others_do_not() -> None:
    """``strict: true`` reaches the call grammar (tools.py), under tool_choice auto too."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tools = messages_to_native({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                                "tools": [{"name": "a", "input_schema": schema, "strict": True},
                                          {"name": "b", "input_schema": schema}]}).call.tools
    assert tools is not None
    assert [t["function"].get("strict") for t in tools] == [True, None]
