"""OpenAI Responses API: request conversion and the event stream, as pure functions (no model, no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from localrun.errors import InvalidRequest
from localrun.server.chat import TokenUsage
from localrun.server.responses.convert import responses_to_native
from localrun.server.responses.stream import ResponsesEncoder

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_a_string_input_is_one_user_message_after_the_instructions() -> None:
    r = responses_to_native({"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 9,
                             "temperature": 0.5, "top_p": 0.9, "store": False})
    assert r.call.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert r.call.options == {"temperature": 0.5, "top_p": 0.9, "num_predict": 9}
    assert r.echo["instructions"] == "be brief" and r.echo["max_output_tokens"] == 9
    assert not r.auto_truncation and not r.call.stream  # OpenAI's default: "disabled"


def test_items_with_calls_and_their_outputs_become_a_chat_history() -> None:
    r = responses_to_native({"model": "m", "tools": [WEATHER], "input": [
        {"role": "developer", "content": "use tools"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather in "},
                                                         {"type": "input_text", "text": "Paris?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{\"city\": \"Lyon\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny, and rain."}]},
    ]})
    assert r.call.messages == [
        {"role": "system", "content": "use tools"},
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"id": "call_2", "function": {"name": "get_weather", "arguments": {"city": "Lyon"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1", "tool_name": "get_weather"},
        {"role": "tool", "content": "rain", "tool_call_id": "call_2", "tool_name": "get_weather"},
        {"role": "assistant", "content": "Sunny, and rain."},
    ]
    assert r.call.tools == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER["parameters"]}}]


def test_namespaced_tools_are_offered_with_qualified_names_and_web_search_is_not_offered() -> None:
    """What Codex sends: functions, a namespace of functions, and a web_search tool."""
    r = responses_to_native({"model": "m", "input": [
        {"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "close_agent", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "closed"}],
        "tools": [WEATHER, {"type": "web_search", "external_web_access": False},
                  {"type": "namespace", "name": "agents", "description": "sub-agents", "tools": [
                      {"type": "function", "name": "close_agent", "parameters": {"type": "object"}}]}]})
    assert [t["function"]["name"] for t in r.call.tools or []] == ["get_weather", "agents.close_agent"]
    assert r.split_name("agents.close_agent") == ("agents", "close_agent")
    assert r.split_name("get_weather") == (None, "get_weather")
    assert r.call.messages[0]["tool_calls"][0]["function"]["name"] == "agents.close_agent"
    assert r.call.messages[1]["tool_name"] == "agents.close_agent"


@pytest.mark.parametrize(("choice", "native"), [
    ("auto", "auto"), ("none", "none"), ("required", "required"),
    ({"type": "function", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
])
def test_tool_choice_maps_to_the_chat_form(choice: Any, native: Any) -> None:
    assert responses_to_native({"model": "m", "input": "x", "tools": [WEATHER], "tool_choice": choice}) \
        .call.tool_choice == native


@pytest.mark.parametrize(("text", "fmt"), [
    (None, None), ({"format": {"type": "text"}}, None), ({"format": {"type": "json_object"}}, "json"),
    ({"format": {"type": "json_schema", "name": "n", "strict": True, "schema": {"type": "object"}}},
     {"type": "object"}),
])
def test_text_format_becomes_the_native_format(text: Any, fmt: Any) -> None:
    assert responses_to_native({"model": "m", "input": "x", "text": text}).call.format == fmt


@pytest.mark.parametrize(("body", "words"), [
    ({"previous_response_id": 5}, "previous_response_id"),
    ({"conversation": "conv_1"}, "Conversations API"),
    ({"prompt": {"id": "pmpt_1", "variables": {"city": "Paris"}}}, "prompt template"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "no stored item with id 'msg_1'"),
    ({"input": [{"type": "item_reference"}]}, "no stored item"),
    ({"background": True, "store": False}, "must be stored"),
    ({"background": "yes"}, "background"),
    ({"input": []}, "input"),
    ({"input": 3}, "input"),
    ({"input": [{"type": "message", "role": "tool", "content": "x"}]}, "role"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]},
     "does not fetch images"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "files"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{oops"}]}, "JSON"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "call_id"),
    ({"input": [{"type": "web_search_call", "id": "w"}]}, "not supported"),
    ({"tools": [{"type": "file_search", "vector_store_ids": []}]}, "function tools"),
    ({"tools": [{"type": "namespace", "name": "ns"}]}, "namespace"),
    ({"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}]}, "namespace holds"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "namespace": 5}]}, "namespace"),
    ({"tools": [{"type": "function", "parameters": {}}]}, "name"),
    ({"tool_choice": {"type": "allowed_tools"}}, "tool_choice"),
    ({"text": {"format": {"type": "json_schema"}}}, "schema"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": "9"}, "max_output_tokens"),
    ({"temperature": "hot"}, "temperature"),
    ({"stream": "yes"}, "stream"),
    ({"store": "no"}, "store"),
    ({"truncation": "middle"}, "truncation"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"reasoning": "high"}, "reasoning"),
    # found by the fuzzer: unhashable values where a type or role name goes were a 500
    ({"input": [{"type": "message", "role": "user", "content": [{"type": [[], {}], "text": "x"}]}]}, "text part"),
    ({"input": [{"type": "message", "role": ["user"], "content": "x"}]}, "role"),
    ({"tools": [{"type": {"a": 1}, "name": "f"}]}, "function tools"),
    ({"text": {"format": {"type": ["json_object"]}}}, "text.format.type"),
])
def test_bad_requests_are_invalid_request_errors_naming_the_field(body: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        responses_to_native({"model": "m", "input": "x", **body})


@pytest.mark.parametrize(("reasoning", "think"), [
    (None, None), ({}, None), ({"effort": "none"}, False), ({"effort": "minimal"}, False), ({"effort": "low"}, "low"),
    ({"effort": "high", "summary": "auto"}, "high"), ({"effort": "xhigh"}, "high"),
])
def test_reasoning_effort_decides_whether_the_model_thinks_and_how_hard(reasoning: Any, think: Any) -> None:
    assert responses_to_native({"model": "m", "input": "x", "reasoning": reasoning}).call.think is think


def test_only_truncation_auto_may_drop_input_items() -> None:
    assert not responses_to_native({"model": "m", "input": "x", "truncation": "disabled"}).auto_truncation
    assert responses_to_native({"model": "m", "input": "x", "truncation": "auto"}).auto_truncation


def _run(encoder: ResponsesEncoder, texts: list[str], calls: list[tuple[str, str, str]],
         hit_limit: bool = False) -> list[tuple[str, dict[str, Any]]]:
    events = encoder.start()
    for t in texts:
        events += encoder.text(t)
    for call in calls:
        events += encoder.tool_call(*call)
    return events + encoder.finish(TokenUsage(prompt=20, cached=12, output=5), hit_limit)


def test_a_streamed_text_reply_has_the_documented_events_in_order() -> None:
    encoder = ResponsesEncoder("m:latest", {"tools": []})
    events = _run(encoder, ["Hel", "lo"], [])
    assert [name for name, _ in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(name == data["type"] for name, data in events)
    assert events[0][1]["response"]["status"] == "in_progress" and events[0][1]["response"]["output"] == []
    final = events[-1][1]["response"]
    assert final == encoder.response and final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == "Hello" and final["output"][0]["status"] == "completed"
    assert final["usage"] == {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 12}, "output_tokens": 5,
                              "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 25}
    item_ids = {data.get("item_id") for _, data in events if "item_id" in data}
    assert item_ids == {final["output"][0]["id"]}


def test_a_tool_call_after_text_closes_the_message_and_streams_its_arguments() -> None:
    args = json.dumps({"city": "Paris"})
    events = _run(ResponsesEncoder("m", {}), ["Let me look."], [("call_1", "get_weather", args)])
    names = [name for name, _ in events]
    assert names[names.index("response.output_item.done") + 1:] == [
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    call = events[-1][1]["response"]["output"][1]
    assert call["type"] == "function_call" and call["call_id"] == "call_1" and call["arguments"] == args
    assert call["status"] == "completed" and call["id"].startswith("fc_")
    added = next(d for n, d in events if n == "response.output_item.added" and d["item"]["type"] == "function_call")
    assert added["item"]["arguments"] == "" and added["output_index"] == 1


def test_a_reply_cut_by_max_output_tokens_is_incomplete() -> None:
    events = _run(ResponsesEncoder("m", {}), ["abc"], [], hit_limit=True)
    assert events[-1][0] == "response.incomplete"
    final = events[-1][1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["status"] == "incomplete"


def test_reasoning_is_its_own_output_item_before_the_message() -> None:
    encoder = ResponsesEncoder("m", {})
    events = encoder.start() + encoder.reasoning("Think") + encoder.reasoning("ing.") + encoder.text("Answer.") \
        + encoder.finish(TokenUsage(5, 0, 4), False)
    assert [n for n, _ in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"]
    reasoning, message = encoder.response["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Thinking."}] and reasoning["summary"] == []
    assert message["content"][0]["text"] == "Answer."
    assert [d["output_index"] for n, d in events if n.endswith(".delta")] == [0, 0, 1]


def test_a_failure_mid_stream_ends_with_error_then_response_failed() -> None:
    encoder = ResponsesEncoder("m", {})
    events = encoder.start() + encoder.text("x") + encoder.fail("runner_crashed", "the runner died")
    assert [n for n, _ in events][-2:] == ["error", "response.failed"]
    assert events[-1][1]["response"]["error"] == {"code": "runner_crashed", "message": "the runner died"}
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))


def test_only_a_tool_that_says_strict_true_is_strict() -> None:
    """Codex says ``strict: false``; a tool that says nothing is not put under a grammar either."""
    tools = [{**WEATHER, "strict": True}, {**WEATHER, "name": "b", "strict": False}, {**WEATHER, "name": "c"}]
    call = responses_to_native({"model": "m", "input": "x", "tools": tools}).call
    assert call.tools is not None
    assert [t["function"].get("strict") for t in call.tools] == [True, None, None]


def test_a_continued_response_reads_the_history_then_its_own_input_without_the_old_instructions() -> None:
    history = [{"id": "msg_1", "type": "message", "role": "user", "content": "What is 2+2?"},
               {"id": "msg_2", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "4", "annotations": [], "logprobs": []}]},
               {"id": "rs_3", "type": "reasoning", "summary": [], "content": []}]
    converted = responses_to_native({"model": "m", "input": "And times 3?", "instructions": "Be terse.",
                                     "previous_response_id": "resp_1"}, history)
    assert converted.call.messages == [{"role": "system", "content": "Be terse."},
                                       {"role": "user", "content": "What is 2+2?"},
                                       {"role": "assistant", "content": "4"},
                                       {"role": "user", "content": "And times 3?"}]
    assert converted.items[:3] == history and converted.store
    assert converted.echo["previous_response_id"] == "resp_1" and converted.echo["store"] is True
    assert not responses_to_native({"model": "m", "input": "x", "store": False}).store


def test_an_item_reference_reads_the_stored_item_it_names() -> None:
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather",
            "arguments": "{\"city\": \"Paris\"}", "status": "completed"}
    converted = responses_to_native(
        {"model": "m", "tools": [WEATHER], "input": [
            {"role": "user", "content": "weather?"}, {"type": "item_reference", "id": "fc_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]},
        find_item={"fc_1": call}.get)
    assert converted.items[1] is call
    assert converted.call.messages[1]["tool_calls"] == [
        {"id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    assert converted.call.messages[2]["tool_name"] == "get_weather"


def test_an_error_names_the_requests_own_item_by_its_index_in_input() -> None:
    history = [{"id": "msg_1", "type": "message", "role": "user", "content": "hi"}]
    with pytest.raises(InvalidRequest, match=r"^input\[0\] must have the 'call_id'"):
        responses_to_native({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}, history)
