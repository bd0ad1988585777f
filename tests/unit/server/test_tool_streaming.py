"""What the parser holds back while a reply may be a tool call, and what a cut reply ends with.

Replies are fed the way a model writes them, a token at a time (token splits as Qwen2.5's
tokenizer makes them). A reply that cannot be a call must reach the client after a token or
two, not at the end (Claude Code's first request waited 2 s for a JSON answer that was never a
call); a reply the token limit cut inside a call must not leak half a call into the text.
"""

from __future__ import annotations

import pytest

from localrun.chat.events import ChatEvent, ContentDelta, ToolCall, collect
from localrun.chat.format import ChatFormat, ToolFormat
from localrun.chat.parse import ChatStreamParser
from localrun.server.anthropic.stream import stop_reason

HERMES = ChatFormat(tools=ToolFormat.HERMES)
NAMES = frozenset({"Bash", "Read", "get_weather"})
CALL = ['<tool_call>', '\n', '{"', 'name', '":', ' "', 'get', '_weather', '",', ' "', 'arguments', '":', ' {"',
        'city', '":', ' "', 'Paris', '"}}', '\n', '</tool_call>']
BARE_CALL = ['{"', 'name', '":', ' "', 'Read', '",', ' "', 'arguments', '":', ' {"', 'path', '":', ' "', 'a',
             '.txt', '"}}']


def first_release(tokens: list[str], tools: frozenset[str] | None = NAMES) -> tuple[int | None, list[ChatEvent]]:
    """Feed ``tokens`` one by one: (how many were fed when the first event came out, all events)."""
    parser = ChatStreamParser(HERMES, tools=tools)
    events: list[ChatEvent] = []
    first = None
    for n, token in enumerate(tokens, 1):
        events += parser.feed(token)
        if events and first is None:
            first = n
    return first, events + parser.finish()


@pytest.mark.parametrize(("tokens", "within"), [
    (["Sure", ",", " here", " is", " the", " plan", "."], 1),
    # Claude Code's topic check answers JSON that is no call: released at its first key.
    (['{"', 'is', 'New', 'Topic', '":', ' true', ',', ' "', 'title', '":', ' "', 'Weather', '"}'], 2),
    # JSON naming something that is not an offered tool: released at the first letter of the name.
    (['{"', 'name', '":', ' "', 'Alice', '",', ' "', 'age', '":', ' ', '3', '}'], 5),
    (['[', '1', ']', ' First', ' point'], 2),
    (['```', 'json', '\n', '{"', 'answer', '":', ' ', '4', '2', '}\n', '```'], 5),
    (['```', 'python', '\n', 'print', '("', 'hi', '")', '\n', '```'], 3),
    (['<', 'b', '>', 'bold', '</', 'b', '>'], 2),
])
def test_a_reply_that_cannot_be_a_call_streams_after_a_token_or_two(tokens: list[str], within: int) -> None:
    first, events = first_release(tokens)
    assert first is not None and first <= within, f"first text after {first} of {len(tokens)} tokens"
    assert collect(events) == collect([ContentDelta("".join(tokens))])


@pytest.mark.parametrize("tokens", [CALL, BARE_CALL, ['```', 'json', '\n', *BARE_CALL, '\n', '```']])
def test_a_call_is_held_until_it_is_whole_then_comes_out_at_once(tokens: list[str]) -> None:
    first, events = first_release(tokens)
    assert first is not None and first >= len(tokens) - 2  # the closing tag or fence may still be on its way
    reply = collect(events)
    assert reply.content == "" and len(reply.tool_calls) == 1


def test_without_tools_nothing_is_held_at_all() -> None:
    first, events = first_release(BARE_CALL, tools=None)
    assert first == 1 and collect(events).content == "".join(BARE_CALL)


def test_time_to_first_text_of_a_json_answer_is_one_token_not_the_whole_reply() -> None:
    """The measure behind the 2.07 s: tokens fed before the first event, against the reply's length."""
    answer = ['{"', 'is', 'New', 'Topic', '":', ' false', ',', ' "', 'title', '":', ' null', '}']
    first, _ = first_release(answer)
    assert first is not None and first / len(answer) < 0.2


# --- a reply the token limit cut --------------------------------------------------------------


def cut(tokens: list[str], truncated: bool = True) -> tuple[str, list[tuple[str, object]]]:
    parser = ChatStreamParser(HERMES, tools=NAMES)
    events = [e for t in tokens for e in parser.feed(t)] + parser.finish(truncated=truncated)
    reply = collect(events)
    return reply.content, [(c.name, c.arguments) for c in reply.tool_calls]


PARIS = ("get_weather", {"city": "Paris"})


@pytest.mark.parametrize("tail", [
    ['\n', '<tool_call>', '\n', '{"', 'name', '":', ' "', 'get'],  # mid second call
    ['\n', '<tool_call>'],                                          # right after its opening tag
    ['\n', '<tool'],                                                # inside the tag itself
    ['\n', '{"', 'name', '":', ' "', 'Read'],                      # a bare second call
])
def test_a_second_call_cut_by_the_limit_leaks_nothing_into_the_text(tail: list[str]) -> None:
    assert cut(CALL + tail) == ("", [PARIS])


def test_a_first_call_cut_by_the_limit_is_no_call_and_no_text() -> None:
    assert cut(["Let", " me", " check", ".\n", *CALL[:9]]) == ("Let me check.\n", [])
    assert cut(BARE_CALL[:6]) == ("", [])


def test_a_call_cut_just_before_its_closing_tag_is_still_the_call() -> None:
    assert cut(CALL[:-2]) == ("", [PARIS])


def test_text_cut_by_the_limit_keeps_all_but_a_half_written_tag() -> None:
    assert cut(["The", " answer", " is", " <", "tool"]) == ("The answer is ", [])
    assert cut(["The", " answer", " is", " 4"]) == ("The answer is 4", [])


def test_an_output_that_ended_by_itself_keeps_an_unfinished_call_as_text() -> None:
    """Only a cut drops it: a model that stops mid-call wrote that text (the client sees it)."""
    content, calls = cut([*CALL, '\n', '<tool_call>', '\n', '{"'], truncated=False)
    assert calls == [PARIS] and content == '<tool_call>\n{"'


def test_anthropic_says_max_tokens_when_the_limit_cut_a_reply_with_calls() -> None:
    assert stop_reason(True, True, None, ()) == ("max_tokens", None)
    assert stop_reason(True, False, None, ()) == ("tool_use", None)
    assert stop_reason(False, False, "END", ("END",)) == ("stop_sequence", "END")


def test_a_streamed_call_is_one_event_with_its_arguments() -> None:
    parser = ChatStreamParser(HERMES, tools=NAMES)
    events = [e for t in CALL for e in parser.feed(t)]
    assert [type(e) for e in events] == [ToolCall] and events[0].arguments == {"city": "Paris"}  # type: ignore[union-attr]
