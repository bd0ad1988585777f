"""Pure pieces of the daemon: wire protocol, option merging, tool-call parsing, OpenAI conversions."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import struct

import pytest

from localrun import errors
from localrun.chat.events import Reply, ToolCall
from localrun.chat.format import ToolFormat
from localrun.chat.tools import forced_call, forced_call_schema
from localrun.engine.types import (
    DoneEvent,
    DoneReason,
    ErrorEvent,
    GenerateRequest,
    LoadOptions,
    RerankResult,
    SamplingOptions,
    TokenEvent,
    TokenLogprob,
    Truncation,
)
from localrun.runtime import protocol
from localrun.runtime.scheduler import DEFAULT
from localrun.server import rerank
from localrun.server.http import json_body, json_reply
from localrun.server.openai import convert as oc
from localrun.server.options import merge_options, parse_keep_alive
from localrun.server.responses.stream import ResponsesEncoder

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


# --- protocol ---------------------------------------------------------------------------------


def test_frames_round_trip_through_a_stream() -> None:
    buf = io.BytesIO(protocol.encode_frame({"op": "x", "text": "héllo"}) + protocol.encode_frame({"op": "y"}))
    assert protocol.read_frame_sync(buf) == {"op": "x", "text": "héllo"}
    assert protocol.read_frame_sync(buf) == {"op": "y"}
    assert protocol.read_frame_sync(buf) is None


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [2**70, -(2**80), _nested(300), "x" * 70_000],
                         ids=["big", "negative", "deep", "long"])
def test_what_orjson_cannot_write_crosses_unchanged(value: object) -> None:
    """A client's schema or tool arguments may hold an integer past 64 bits or deep nesting: the frame
    carries them as sent (not as a float, not refused)."""
    frame = protocol.encode_frame({"op": "x", "value": value})
    assert protocol.read_frame_sync(io.BytesIO(frame)) == {"op": "x", "value": value}


def test_non_finite_logprobs_and_scores_cross_the_pipe() -> None:
    """A token a grammar rules out has a logprob of -inf; a random model may score nan."""
    token = TokenEvent("a", (TokenLogprob("a", -0.5, (("a", -0.5), ("b", float("-inf")))),))
    frame = protocol.encode_frame(protocol.encode_event(token))
    back = protocol.decode_event(protocol.read_frame_sync(io.BytesIO(frame)) or {})
    assert back == token
    scores = protocol.encode_frame(protocol.encode_rerank_result(RerankResult([1.5, float("inf"), float("nan")], 3,
                                                                              [False, True, False])))
    result = protocol.decode_rerank_result(protocol.read_frame_sync(io.BytesIO(scores)))
    assert result.scores[:2] == [1.5, float("inf")] and result.scores[2] != result.scores[2]
    assert result.truncated == [False, True, False] and result.prompt_eval_count == 3


def test_every_reply_is_strict_json_whatever_the_numbers() -> None:
    """Whole replies and streamed events alike: a non-finite score is null (strict parsers refuse
    NaN and -Infinity), and what orjson cannot write (a 70-bit integer in a model's tool arguments,
    nesting past 255 levels, an int key) still arrives unchanged."""
    def strict(raw: bytes) -> object:
        return json.loads(raw, parse_constant=lambda name: pytest.fail(f"{name} in a reply"))

    assert strict(json_body({"scores": [1.5, float("inf"), float("nan")]})) == {"scores": [1.5, None, None]}
    big = {"arguments": {"n": 2**70, "x": float("-inf")}, "deep": [[[[1]]]]}
    assert strict(json_body(big)) == {"arguments": {"n": 2**70, "x": None}, "deep": [[[[1]]]]}
    nested: object = 1
    for _ in range(300):
        nested = [nested]
    assert strict(json_body({"v": nested, 3: "int key"})) == {"v": nested, "3": "int key"}
    reply = json_reply({"logprob": float("-inf"), "text": "é"}, status=201, headers={"X-A": "b"})
    assert reply.status == 201 and reply.content_type == "application/json" and reply.headers["X-A"] == "b"
    assert isinstance(reply.body, bytes) and strict(reply.body) == {"logprob": None, "text": "é"}


async def test_frames_come_whole_however_the_stream_cuts_them() -> None:
    """Three frames fed a byte at a time, then all at once: the same messages in order, then the end."""
    wire = b"".join(protocol.encode_frame({"op": "event", "id": i, "text": "é" * i}) for i in range(3))
    for size in (1, len(wire)):
        reader = asyncio.StreamReader()
        stream = protocol.frames(reader)
        got: list[object] = []

        async def feed(reader: asyncio.StreamReader = reader, size: int = size) -> None:
            for at in range(0, len(wire), size):
                reader.feed_data(wire[at:at + size])
                await asyncio.sleep(0)
            reader.feed_eof()

        feeding = asyncio.create_task(feed())
        while (batch := await protocol.read_messages(stream)) is not None:
            got.extend(batch)
        await feeding
        assert got == [{"op": "event", "id": i, "text": "é" * i} for i in range(3)]


@pytest.mark.parametrize("wire", [struct.pack(">I", 10) + b"abc", struct.pack(">I", 3) + b"[1]",
                                  struct.pack(">I", protocol.MAX_FRAME + 1)])
async def test_a_frame_stream_refuses_what_read_frame_refuses(wire: bytes) -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(wire)
    reader.feed_eof()
    with pytest.raises(protocol.ProtocolError):
        await protocol.read_messages(protocol.frames(reader))


async def test_truncated_or_garbage_frames_are_protocol_errors() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(struct.pack(">I", 10) + b"abc")
    reader.feed_eof()
    with pytest.raises(protocol.ProtocolError):
        await protocol.read_frame(reader)
    with pytest.raises(protocol.ProtocolError):
        protocol.read_frame_sync(io.BytesIO(struct.pack(">I", 3) + b"[1]"))


def test_requests_events_and_errors_survive_the_wire() -> None:
    req = GenerateRequest(prompt="hi", sampling=SamplingOptions(temperature=0.0, stop=("\n",), seed=3),
                          format={"type": "object"}, truncation=Truncation.REJECT, num_keep=4)
    assert protocol.decode_request(protocol.encode_request(req)) == req
    token = TokenEvent("a", (TokenLogprob("a", -0.5, (("a", -0.5), ("b", -1.0))),))
    done = DoneEvent(DoneReason.LENGTH, 3, 1, 2, 10, 20, 0, (1, 2, 3))
    for event in (token, done):
        assert protocol.decode_event(protocol.encode_event(event)) == event
    err = protocol.decode_event(protocol.encode_event(ErrorEvent(errors.ContextOverflow("too long"))))
    assert isinstance(err, ErrorEvent) and isinstance(err.error, errors.ContextOverflow)
    assert isinstance(protocol.decode_error({"type": "os.system", "message": "x"}), errors.EngineError)
    busy = protocol.decode_error(protocol.encode_error(errors.Busy("full", 3.0)))
    assert isinstance(busy, errors.Busy) and busy.retry_after == 3.0
    opts = LoadOptions(num_ctx=99, adapter="/x")
    assert protocol.decode_load_options(protocol.encode_load_options(opts)) == opts


# --- options ----------------------------------------------------------------------------------


def test_request_options_override_modelfile_parameters_and_split_load_from_sampling() -> None:
    load, sampling, extras = merge_options(
        {"temperature": 0.2, "num_ctx": 1024, "stop": ["<end>"]},
        {"temperature": 0.7, "num_predict": -1, "seed": 5, "mirostat": 2, "num_keep": 4},
        n_ctx_train=2048,
    )
    assert load == LoadOptions(num_ctx=1024) and extras["num_ctx"] == 1024
    assert sampling.temperature == 0.7 and sampling.stop == ("<end>",) and sampling.num_predict is None
    assert sampling.seed == 5 and extras["num_keep"] == 4


def test_a_modelfile_num_ctx_is_capped_at_the_trained_context() -> None:
    load, _, _ = merge_options({"num_ctx": 100000}, {}, n_ctx_train=2048)
    assert load.num_ctx == 2048


@pytest.mark.parametrize("options", [{"num_ctx": "x"}, {"top_k": 1.5}, {"temperature": True}, {"stop": [1]},
                                     {"use_mmap": "yes"}, {"num_ctx": 0}, {"top_p": 2}])
def test_bad_options_name_the_option(options: dict[str, object]) -> None:
    with pytest.raises(errors.OptionError, match=next(iter(options))):
        merge_options({}, options)


@pytest.mark.parametrize(
    "bad",
    [
        {"top_p": 2.0}, {"top_p": -0.1}, {"temperature": -1.0}, {"temperature": float("nan")},
        {"temperature": 150}, {"top_k": -5}, {"min_p": 1.5}, {"typical_p": 3}, {"repeat_penalty": -1.0},
        {"repeat_last_n": -2}, {"presence_penalty": 5.0}, {"frequency_penalty": -3.0}, {"top_logprobs": 21},
        {"top_k": 1.5}, {"stop": ["a", 3]}, {"stop": [str(i) for i in range(17)]}, {"stop": ["x" * 100_000]},
        {"temperature": True}, {"num_keep": -1},
    ],
)
def test_impossible_sampling_options_are_refused_once_here_before_any_engine(bad: dict[str, object]) -> None:
    """The one validation layer: the engine only asserts these ranges (tests/unit/engine)."""
    with pytest.raises(errors.OptionError, match=next(iter(bad))):
        merge_options({}, bad)


def test_negative_num_predict_means_no_limit_and_negative_seed_means_random() -> None:
    _, sampling, _ = merge_options({}, {"num_predict": -3, "seed": -1})
    assert sampling.num_predict is None and sampling.seed is None


def test_keep_alive_values() -> None:
    assert parse_keep_alive(None) is DEFAULT
    assert parse_keep_alive("5m") == 300 and parse_keep_alive(0) == 0 and parse_keep_alive("-1") is None
    with pytest.raises(errors.OptionError):
        parse_keep_alive("later")
    with pytest.raises(errors.OptionError):
        parse_keep_alive([1])


# --- tools ------------------------------------------------------------------------------------


def test_forced_tool_choice_builds_a_schema_for_the_named_function() -> None:
    schema = forced_call_schema(TOOLS, {"type": "function", "function": {"name": "get_weather"}})
    assert schema is not None
    assert schema["properties"]["name"] == {"const": "get_weather"}
    assert schema["properties"]["arguments"]["required"] == ["city"]
    assert len(forced_call_schema(TOOLS, "required")["anyOf"]) == 2  # type: ignore[index]
    assert forced_call_schema(TOOLS, "auto") is None
    with pytest.raises(errors.InvalidRequest, match="nope"):
        forced_call_schema(TOOLS, {"type": "function", "function": {"name": "nope"}})


def test_a_forced_call_takes_the_models_own_format() -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    hermes = forced_call(TOOLS, choice, ToolFormat.HERMES)
    assert hermes is not None and hermes.frame == ("<tool_call>\n", "\n</tool_call>")
    llama = forced_call(TOOLS, choice, ToolFormat.LLAMA3)
    assert llama is not None and llama.frame == ("", "") and "parameters" in llama.schema["properties"]
    mistral = forced_call(TOOLS, "required", ToolFormat.MISTRAL)
    assert mistral is not None and mistral.schema["type"] == "array"


# --- OpenAI conversions -----------------------------------------------------------------------


def test_chat_request_conversion_keeps_unset_fields_unset() -> None:
    call = oc.chat_to_native({
        "model": "m", "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1"},
        ],
        "max_completion_tokens": 7, "stop": "END", "seed": 1, "num_ctx": 4096, "keep_alive": "10m",
        "stream": True, "stream_options": {"include_usage": True},
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
    })
    assert call.options == {"seed": 1, "stop": ["END"], "num_predict": 7, "num_ctx": 4096}
    assert call.keep_alive == 600 and call.stream and call.include_usage
    assert call.format == {"type": "object"}
    assert [m["role"] for m in call.messages] == ["system", "user", "assistant", "tool"]
    assert call.messages[1]["content"] == "hi there"
    assert call.messages[2]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert oc.response_format({"type": "json_object"}) == "json"


def test_response_shapes() -> None:
    call = ToolCall("add", {"a": 1})
    msg = oc.chat_message(Reply("", "why", (call,)))
    assert msg["content"] is None and msg["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert msg["tool_calls"][0]["id"] == call.id and msg["reasoning_content"] == "why"
    assert oc.chat_delta(call)["tool_calls"][0]["index"] == 0
    assert oc.finish_reason(DoneReason.LENGTH, False) == "length"
    assert oc.finish_reason(DoneReason.STOP, True) == "tool_calls"
    u = oc.usage(10, 5, 4)
    assert u["total_tokens"] == 15 and u["prompt_tokens_details"]["cached_tokens"] == 4
    raw = base64.b64decode(oc.embedding_vector([1.0, -2.0], "base64"))
    assert struct.unpack("<2f", raw) == (1.0, -2.0)
    lp = oc.completion_logprobs([TokenLogprob("a", -1.0, (("a", -1.0),)), TokenLogprob("bc", -2.0)])
    assert lp["text_offset"] == [0, 1] and lp["top_logprobs"][0] == {"a": -1.0}


def test_forced_schemas_drop_keywords_a_grammar_cannot_enforce() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "description": "count"},
                                         "when": {"type": "string", "format": "date"},
                                         "tags": {"type": "array", "items": {"type": "string", "format": "email"}}},
        "required": ["n"]}}}]
    schema = forced_call_schema(tools, "required")
    args = schema["properties"]["arguments"]  # type: ignore[index]
    assert args["properties"]["n"] == {"type": "integer", "description": "count"}
    assert args["properties"]["when"]["format"] == "date"
    assert args["properties"]["tags"]["items"] == {"type": "string"}
    assert args["required"] == ["n"]


def test_a_reply_echoing_a_hostile_nesting_is_still_written() -> None:
    """The request reader takes ~1000 levels (json's own limit) and a Responses reply echoes the
    tools back: the writer must manage whatever the reader let in."""
    nested: object = 1
    for _ in range(800):
        nested = [nested]
    assert json.loads(json_body({"tools": nested})) == {"tools": nested}
    stream = ResponsesEncoder("m", {"metadata": {"a": nested}})  # every snapshot carries the echo
    for _, data in stream.start():
        assert json.loads(json_body(data))["response"]["metadata"] == {"a": nested}


def test_a_score_that_is_not_a_number_ranks_last() -> None:
    """A broken reranker's NaN would make the sort's order a matter of chance; it goes last, as null."""
    result = RerankResult([0.5, float("nan"), 2.0, float("-inf"), 0.5], 9, [False] * 5)
    ranked = rerank.ranked(result, ["a", "b", "c", "d", "e"], 5, with_documents=True)
    assert [r["index"] for r in ranked] == [2, 0, 4, 3, 1]  # type: ignore[index]
    assert json.loads(json_body(ranked))[-1] == {"index": 1, "relevance_score": None, "document": {"text": "b"}}
