"""The chat output parser: answer text, reasoning and tool calls, streamed or all at once.

Every case is checked twice: whole, and fed one character at a time (the worst streaming split),
and both must give the same reply, with nothing lost and no tag leaking into the text.
"""

from __future__ import annotations

import pytest

from localrun.chat.events import ContentDelta, ThinkingDelta, ToolCall, collect
from localrun.chat.format import ChatFormat, ThinkingTags, ToolFormat, describe
from localrun.chat.parse import ChatStreamParser, parse_reply

NAMES = frozenset({"get_weather", "add"})
HERMES = ChatFormat(tools=ToolFormat.HERMES)
THINKER = ChatFormat(tools=ToolFormat.HERMES, thinking=ThinkingTags(toggle=True))
WEATHER = ("get_weather", {"city": "Paris"})


def both(fmt: ChatFormat, text: str, **kw: object) -> tuple[str, str, list[tuple[str, dict[str, object]]]]:
    """Parse whole and char by char; assert they agree; return (content, thinking, calls)."""
    whole = parse_reply(fmt, text, **kw)  # type: ignore[arg-type]
    parser = ChatStreamParser(fmt, **kw)  # type: ignore[arg-type]
    events = [e for ch in text for e in parser.feed(ch)] + parser.finish()
    streamed = collect(events)
    calls = [(c.name, c.arguments) for c in whole.tool_calls]
    assert (streamed.content, streamed.thinking, [(c.name, c.arguments) for c in streamed.tool_calls]) == (
        whole.content, whole.thinking, calls)
    return whole.content, whole.thinking, calls


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}',          # the end came first
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',                        # the starter's bare JSON
    '{"name": "get_weather", "parameters": {"city": "Paris"}}',                       # Llama 3.x
    '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
    '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',          # Mistral
    '```json\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n```',
    '{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}',
])
def test_every_common_call_shape_becomes_one_call(text: str) -> None:
    fmt = describe_for(text)
    assert both(fmt, text, tools=NAMES) == ("", "", [WEATHER])


def describe_for(text: str) -> ChatFormat:
    if text.startswith("<|python_tag|>"):
        return ChatFormat(tools=ToolFormat.LLAMA3)
    if text.startswith("[TOOL_CALLS]"):
        return ChatFormat(tools=ToolFormat.MISTRAL)
    return HERMES


def test_text_around_calls_is_kept_in_order() -> None:
    text = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\nDone.')
    parser = ChatStreamParser(HERMES, tools=NAMES)
    events = [e for ch in text for e in parser.feed(ch)] + parser.finish()
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "ContentDelta" and kinds[-1] == "ContentDelta"
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.index, c.name) for c in calls] == [(0, "get_weather"), (1, "add")]
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)
    reply = collect(events)
    assert reply.content == "Let me check.\nDone." and "<tool_call>" not in reply.content


def test_two_bare_calls_in_a_row() -> None:
    text = '{"name": "add", "arguments": {"a": 1}}\n{"name": "add", "arguments": {"a": 2}}'
    assert both(HERMES, text, tools=NAMES)[2] == [("add", {"a": 1}), ("add", {"a": 2})]


@pytest.mark.parametrize("text", [
    '{"name": "rm_rf", "arguments": {}}',          # not an offered tool
    '{"answer": 42}',                             # JSON, but no call
    "{this is prose in braces}",
    "[1] First point\n[2] Second point",
    "```python\nprint('hi')\n```",
    "<tool_call>not json</tool_call> and more",
    "I would call get_weather for that.",
])
def test_what_is_not_a_call_is_content_verbatim(text: str) -> None:
    assert both(HERMES, text, tools=NAMES) == (text, "", [])


def test_a_json_example_after_prose_is_not_a_call() -> None:
    text = 'Call it like this: {"name": "add", "arguments": {"a": 1}}'
    assert both(HERMES, text, tools=NAMES) == (text, "", [])


def test_without_tools_nothing_is_parsed_and_nothing_is_held() -> None:
    text = '<tool_call>{"name": "add", "arguments": {}}</tool_call>'
    parser = ChatStreamParser(HERMES)
    assert parser.feed(text[:5]) == [ContentDelta("<tool")]
    assert both(HERMES, text) == (text, "", [])


def test_streaming_holds_only_what_may_be_a_tag() -> None:
    parser = ChatStreamParser(HERMES, tools=NAMES)
    assert parser.feed("Hello") == [ContentDelta("Hello")]
    assert parser.feed(" there <tool") == [ContentDelta(" there ")]
    assert parser.feed("_call>") == []
    assert parser.feed("<b>") == []
    tail = parser.finish()
    assert tail == [ContentDelta("<tool_call><b>")]
    fresh = ChatStreamParser(HERMES, tools=NAMES)
    assert fresh.feed("<") == [] and fresh.feed("b>bold") == [ContentDelta("<b>bold")]


def test_a_call_streams_as_soon_as_it_is_complete() -> None:
    parser = ChatStreamParser(HERMES, tools=NAMES)
    assert parser.feed('{"name": "add", "arguments": {"a": 1}') == []
    events = parser.feed("}")
    assert len(events) == 1 and isinstance(events[0], ToolCall) and events[0].arguments == {"a": 1}
    assert parser.feed("\nThat is all.") == [ContentDelta("That is all.")]


def test_thinking_is_split_from_the_answer() -> None:
    text = "<think>\nThe user greets me.\n</think>\n\nHello!"
    assert both(THINKER, text, think=True) == ("Hello!", "\nThe user greets me.\n", [])
    # think false: the reply is not split (what the model wrote stays in the content)
    assert both(THINKER, text, think=False)[0] == text


def test_thinking_opened_by_the_prompt_and_a_call_after_it() -> None:
    text = 'Paris, weather.</think>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert both(THINKER, text, think=True, in_thinking=True, tools=NAMES) == ("", "Paris, weather.", [WEATHER])


def test_thinking_that_never_closes_is_all_thinking() -> None:
    assert both(THINKER, "hmm, let me see", think=True, in_thinking=True) == ("", "hmm, let me see", [])


def test_thinking_deltas_stream_separately() -> None:
    parser = ChatStreamParser(THINKER, think=True)
    out = parser.feed("<think>a") + parser.feed("b</th") + parser.feed("ink>c") + parser.finish()
    assert out == [ThinkingDelta("a"), ThinkingDelta("b"), ContentDelta("c")]


# --- the per-model description ----------------------------------------------------------------

QWEN25_HEAD = "{%- if tools %}<tool_call>{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}"
QWEN3_HEAD = ("{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>{% endif %}"
              "{% if tools %}<tool_call>{% endif %}{{ messages[0].content }}")


def test_describe_reads_the_template() -> None:
    assert describe(None) == ChatFormat()
    assert describe("{% for m in messages %}{{ m.content }}{% endfor %}") == ChatFormat()
    assert describe(QWEN25_HEAD) == ChatFormat(tools=ToolFormat.HERMES)
    assert describe(QWEN3_HEAD) == ChatFormat(tools=ToolFormat.HERMES, thinking=ThinkingTags(toggle=True))
    llama = "{% if tools %}<|start_header_id|>ipython{% endif %}"
    assert describe(llama).tools is ToolFormat.LLAMA3
    assert describe("{{ '[AVAILABLE_TOOLS]' + (tools | tojson) }}").tools is ToolFormat.MISTRAL
    assert describe("{% if tools %}{{ tools | tojson }}{% endif %}").tools is ToolFormat.JSON
    go = "{{ if .Tools }}{{ .Tools }}{{ end }}{{ range .Messages }}{{ .Content }}{{ end }}"
    assert describe(go).tools is ToolFormat.JSON
    assert describe("{{ range .Messages }}{{ .Content }}{{ end }}").tools is ToolFormat.NONE


def test_starts_in_thinking_reads_the_end_of_the_prompt() -> None:
    assert THINKER.starts_in_thinking("<|im_start|>assistant\n<think>\n")
    assert not THINKER.starts_in_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not HERMES.starts_in_thinking("<think>\n")


def test_leading_whitespace_is_kept_at_the_start_and_dropped_after_blocks() -> None:
    assert both(HERMES, " there was a king")[0] == " there was a king"  # a completion may start with a space
    assert both(HERMES, "  \n")[0] == "  \n"
    assert both(THINKER, "<think>hm</think>\n\nAnswer", think=True)[0] == "Answer"
    text = '  {"name": "add", "arguments": {}}\n\nDone.'
    assert both(HERMES, text, tools=NAMES) == ("Done.", "", [("add", {})])
