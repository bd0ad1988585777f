"""A prompt over the context is never cut silently: the rules as pure functions (no model, no server).

Each API names both counts in the words its clients look for; /v1 refuses unless the client asks
for a cut and then says it; /v1/responses ``truncation: "auto"`` drops whole input items (never
the instructions, never a call apart from its result); a message ``thread`` is refused with the
error code the SDKs resend on.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from localrun.engine.types import DoneEvent, DoneReason, Truncation
from localrun.errors import ContextOverflow, InvalidRequest
from localrun.server.anthropic.convert import messages_to_native, prompt_too_long, thread_refusal
from localrun.server.middleware import error_message
from localrun.server.ollama.routes import truncation
from localrun.server.openai import convert as oc
from localrun.server.responses.convert import drop_oldest, responses_to_native

OVERFLOW = ContextOverflow("the prompt is 300 tokens; a request to this model holds at most 256", 300, 256)


@pytest.mark.parametrize(("path", "expected"), [
    ("/v1/messages", "prompt is too long: 300 tokens > 256 maximum"),
    ("/v1/chat/completions", "This model's maximum context length is 256 tokens. However, your messages resulted "
                             "in 300 tokens."),
    ("/v1/completions", "This model's maximum context length is 256 tokens. However, your prompt resulted in "
                        "300 tokens."),
    ("/v1/responses", "Your input exceeds the context window of this model: 300 tokens > 256 maximum."),
    ("/api/chat", "the prompt is 300 tokens; a request to this model holds at most 256"),
])
def test_each_api_names_both_counts_in_its_own_words(path: str, expected: str) -> None:
    assert error_message(make_mocked_request("POST", path), OVERFLOW).startswith(expected)


def test_the_anthropic_wording_is_exactly_what_claude_code_looks_for() -> None:
    assert prompt_too_long(208310, 200000) == "prompt is too long: 208310 tokens > 200000 maximum"


def test_an_overflow_without_counts_keeps_its_message() -> None:
    bare = ContextOverflow("too long")
    assert error_message(make_mocked_request("POST", "/v1/messages"), bare) == "too long"


@pytest.mark.parametrize(("body", "default", "expected"), [
    ({}, True, Truncation.FRONT), ({}, False, Truncation.REJECT),
    ({"truncate": True}, False, Truncation.FRONT), ({"truncate": False}, True, Truncation.REJECT),
])
def test_truncate_defaults_to_a_cut_on_api_and_a_refusal_on_v1(body: dict[str, Any], default: bool,
                                                               expected: Truncation) -> None:
    assert truncation(body, default=default) is expected


def test_a_cut_v1_reply_says_how_many_tokens_went() -> None:
    assert oc.usage(10, 2, 0)["total_tokens"] == 12 and "prompt_truncated_count" not in oc.usage(10, 2, 0)
    assert oc.usage(10, 2, 0, truncated_tokens=7)["prompt_truncated_count"] == 7
    done = DoneEvent(DoneReason.STOP, 10, 0, 2, 1, 1, truncated_tokens=7)
    assert oc.truncation_note(done) == {"prompt_truncated_count": 7}
    assert oc.truncation_note(DoneEvent(DoneReason.STOP, 10, 0, 2, 1, 1)) == {} and oc.truncation_note(None) == {}


# --- /v1/responses truncation ----------------------------------------------------------------

ITEMS: list[dict[str, Any]] = [
    {"role": "developer", "content": "use tools"},
    {"type": "message", "role": "user", "content": "first question"},
    {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
    {"role": "system", "content": "mid-conversation note"},
    {"type": "function_call_output", "call_id": "c1", "output": "found it"},
    {"type": "message", "role": "assistant", "content": "first answer"},
    {"type": "message", "role": "user", "content": "second question"},
]


def test_truncation_is_disabled_unless_auto_is_asked_for() -> None:
    assert not responses_to_native({"model": "m", "input": "x"}).auto_truncation
    assert not responses_to_native({"model": "m", "input": "x", "truncation": "disabled"}).auto_truncation
    assert responses_to_native({"model": "m", "input": "x", "truncation": "auto"}).auto_truncation


def test_dropping_the_oldest_items_keeps_the_instructions_and_a_call_with_its_result() -> None:
    assert drop_oldest(ITEMS, 0) == ITEMS
    assert drop_oldest(ITEMS, 1) == [ITEMS[0], *ITEMS[2:]]
    # The call goes, so its result goes with it; system and developer messages stay.
    assert drop_oldest(ITEMS, 2) == [ITEMS[0], ITEMS[3], ITEMS[5], ITEMS[6]]
    assert drop_oldest(ITEMS, 4) == [ITEMS[0], ITEMS[3], ITEMS[6]]


def test_without_oldest_rebuilds_the_messages_after_the_instructions() -> None:
    r = responses_to_native({"model": "m", "instructions": "be brief", "truncation": "auto", "input": ITEMS})
    assert r.droppable == 5
    call, dropped = r.without_oldest(2)
    assert dropped == 3  # the question, the call and the call's result
    assert call.messages == [
        {"role": "system", "content": "be brief"}, {"role": "system", "content": "use tools"},
        {"role": "system", "content": "mid-conversation note"}, {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second question"},
    ]
    assert r.call.messages[1:3] == [{"role": "system", "content": "use tools"},
                                    {"role": "user", "content": "first question"}]  # the request's own call is kept


def test_a_string_input_is_one_droppable_item() -> None:
    r = responses_to_native({"model": "m", "input": "hello", "truncation": "auto"})
    assert r.droppable == 1 and r.call.messages == [{"role": "user", "content": "hello"}]


# --- Anthropic threads ---------------------------------------------------------------------------

def _messages(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], **extra}


def test_a_thread_is_read_and_refused_with_the_code_the_sdks_resend_on() -> None:
    assert messages_to_native(_messages()).thread is None
    assert messages_to_native(_messages(thread=None)).thread is None
    assert messages_to_native(_messages(thread={"type": "continue", "previous_message_id": "msg_1"})).thread \
        == "continue"
    refusal = thread_refusal("continue")
    assert refusal.status == 400 and refusal.code == "thread_unsupported_request" and "continue" in refusal.message


@pytest.mark.parametrize("thread", [{"type": "fork"}, {"type": ["continue"]}, "continue", 3, []])
def test_a_malformed_thread_is_an_invalid_request(thread: Any) -> None:
    with pytest.raises(InvalidRequest, match="thread"):
        messages_to_native(_messages(thread=thread))
