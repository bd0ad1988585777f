"""Upstream replies as chat events, and chat requests as /v1 and /api bodies (pure conversions)."""

from __future__ import annotations

import json
import math

import pytest

from localrun.chat.events import ContentDelta, ThinkingDelta, ToolCall
from localrun.engine.types import DoneReason
from localrun.errors import OptionError, UpstreamError
from localrun.upstream import ollama_api, openai_api
from localrun.upstream.requests import ChatRequest, RerankRequest, sampling_from_options

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]


def _chunk(delta: dict[str, object] | None = None, finish: str | None = None, **extra: object) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra})


def test_openai_stream_splits_reasoning_content_and_assembles_tool_calls() -> None:
    d = openai_api.StreamDecoder()
    events = []
    events += d.feed(_chunk({"role": "assistant", "content": ""}))
    events += d.feed(_chunk({"reasoning_content": "Let me "}))
    events += d.feed(_chunk({"reasoning": "check."}))
    events += d.feed(_chunk({"content": "Sure."}))
    events += d.feed(_chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "get_weather",
                                                                                         "arguments": '{"ci'}}]}))
    events += d.feed(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]}))
    events += d.feed(_chunk({"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "get_time",
                                                                                         "arguments": "{}"}}]}))
    events += d.feed(_chunk(finish="tool_calls"))
    events += d.feed(json.dumps({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 9,
                                                          "prompt_tokens_details": {"cached_tokens": 8}}}))
    events += d.feed("[DONE]")
    assert events == [ThinkingDelta("Let me "), ThinkingDelta("check."), ContentDelta("Sure."),
                      ToolCall("get_weather", {"city": "Paris"}, 0, "call_1"), ToolCall("get_time", {}, 1, "call_2")]
    done = d.done(1, 2)
    assert (done.prompt_eval_count, done.cached_tokens, done.eval_count) == (12, 8, 9)
    assert done.done_reason is DoneReason.STOP


def test_openai_stream_cut_short_or_failing_is_an_upstream_error() -> None:
    d = openai_api.StreamDecoder()
    d.feed(_chunk({"content": "Hel"}))
    with pytest.raises(UpstreamError, match="before its finish_reason"):
        d.done(0, 0)
    with pytest.raises(UpstreamError, match="mid-reply: overloaded"):
        d.feed(json.dumps({"error": {"message": "overloaded"}}))
    with pytest.raises(UpstreamError, match="not JSON"):
        d.feed("{nope")


def test_a_call_cut_by_max_tokens_is_content_not_a_crash() -> None:
    d = openai_api.StreamDecoder()
    d.feed(_chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "get_weather", "arguments": '{"ci'}}]}))
    assert d.feed(_chunk(finish="length")) == [ContentDelta('{"ci')]
    assert d.done(0, 0).done_reason is DoneReason.LENGTH


def test_ollama_stream_and_final_counts() -> None:
    d = ollama_api.StreamDecoder()
    events = d.feed(json.dumps({"message": {"role": "assistant", "content": "", "thinking": "hmm"}, "done": False}))
    events += d.feed(json.dumps({"message": {"content": "Hi", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}, "done": False}))
    events += d.feed(json.dumps({"message": {"content": ""}, "done": True, "done_reason": "length",
                                 "prompt_eval_count": 5, "eval_count": 3, "prompt_eval_cached_count": 4}))
    assert events[:2] == [ThinkingDelta("hmm"), ContentDelta("Hi")]
    call = events[2]
    assert isinstance(call, ToolCall) and call.arguments == {"city": "Paris"}
    done = d.done(0, 0)
    assert (done.done_reason, done.prompt_eval_count, done.cached_tokens) == (DoneReason.LENGTH, 5, 4)
    with pytest.raises(UpstreamError, match="final chunk"):
        ollama_api.StreamDecoder().done(0, 0)


def test_native_messages_become_openai_messages_with_paired_ids() -> None:
    native = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                           "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "toolu_9", "function": {"name": "get_time",
                                                                                            "arguments": {}}}]},
        {"role": "tool", "content": "noon", "tool_call_id": "toolu_9"},
    ]
    out = openai_api.messages(native)
    first_id = out[2]["tool_calls"][0]["id"]  # type: ignore[index]
    assert out[3] == {"role": "tool", "tool_call_id": first_id, "content": "sunny", "name": "get_weather"}
    assert out[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'  # type: ignore[index]
    assert out[5]["tool_call_id"] == "toolu_9"


def test_chat_bodies_carry_only_what_the_client_set() -> None:
    req = ChatRequest(model="m", messages=[{"role": "user", "content": "x"}], tools=TOOLS,
                      tool_choice={"type": "function", "function": {"name": "get_time"}},
                      format={"type": "object"}, think=False,
                      sampling=sampling_from_options({"temperature": 0, "num_predict": -1, "stop": "END", "top_k": 5}))
    body = openai_api.chat_body(req)
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "response",
                                       "schema": {"type": "object"}, "strict": True}}
    assert body["stop"] == ["END"] and body["temperature"] == 0 and body["top_k"] == 5
    assert "max_tokens" not in body and "top_p" not in body and "seed" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    legacy = openai_api.legacy_schema_body(body)
    assert legacy is not None and legacy["response_format"] == {"type": "json_object", "schema": {"type": "object"}}
    native = ollama_api.chat_body(req)
    assert [t["function"]["name"] for t in native["tools"]] == ["get_time"]  # type: ignore[index]
    assert native["format"] == {"type": "object"} and native["think"] is False
    assert native["options"] == {"temperature": 0.0, "top_k": 5, "stop": ["END"]}
    with pytest.raises(OptionError, match="temperature"):
        sampling_from_options({"temperature": "hot"})


def test_a_rerank_reply_is_read_back_in_the_documents_order() -> None:
    body = openai_api.rerank_body(RerankRequest(model="m", query="q", documents=["a", "b", "c"], truncate=False))
    assert body == {"model": "m", "query": "q", "documents": ["a", "b", "c"], "top_n": 3,
                    "return_documents": False, "truncate": False}
    assert "truncate" not in openai_api.rerank_body(RerankRequest(model="m", query="q", documents=["a"]))
    reply = {"results": [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": -1},
                         {"index": 1, "relevance_score": None}],
             "usage": {"total_tokens": 12},
             "meta": {"warnings": [openai_api.CUT_WARNING.format(2), "something else", 7]}}
    result = openai_api.rerank_result(reply, 3)
    assert result.scores[0] == -1.0 and result.scores[2] == 0.9 and math.isnan(result.scores[1])
    assert result.prompt_eval_count == 12 and result.truncated == [False, False, True]


@pytest.mark.parametrize("reply", [
    {}, {"results": {}}, {"results": [{"index": 0, "relevance_score": 1.0}]},
    {"results": [{"index": 0, "relevance_score": 1.0}, {"index": 0, "relevance_score": 2.0}]},
    {"results": [{"index": 0, "relevance_score": 1.0}, {"index": 5, "relevance_score": 2.0}]},
    {"results": [{"index": 0, "relevance_score": 1.0}, {"index": True, "relevance_score": 2.0}]},
    {"results": [{"index": 0, "relevance_score": 1.0}, {"index": 1, "relevance_score": "high"}]},
    {"results": [{"index": 0, "relevance_score": 1.0}, "doc"]},
])
def test_a_rerank_reply_that_does_not_score_each_document_once_is_an_upstream_error(reply: object) -> None:
    with pytest.raises(UpstreamError, match="rerank reply"):
        openai_api.rerank_result(reply, 2)


def test_an_ollama_show_reply_gives_capabilities_and_text_details_only() -> None:
    shown = ollama_api.shown({"capabilities": ["completion", "vision", 3], "model_info": {"x": 1},
                              "details": {"family": "gemma3", "parameter_size": 4, "families": ["gemma3", None]}})
    assert shown is not None and shown.capabilities == ("completion", "vision")
    assert shown.details == {"family": "gemma3", "families": ["gemma3"]}
    assert ollama_api.shown({"details": {}}) is None and ollama_api.shown([]) is None  # an older Ollama: unknown


@pytest.mark.parametrize("decoder", [openai_api.StreamDecoder, ollama_api.StreamDecoder])
def test_a_chunk_nested_past_the_limit_is_an_upstream_error_not_a_crash(decoder: type) -> None:
    with pytest.raises(UpstreamError, match="nests deeper than 128"):
        decoder().feed("[" * 5000 + "]" * 5000)  # Python's own parser would raise RecursionError
