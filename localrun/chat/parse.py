"""Model output text -> typed chat events: answer text, reasoning text and tool calls.

The one parser every chat API uses (/api/chat, /v1/chat/completions, and any later API). It knows
nothing about HTTP or JSON shapes of an API; handlers map its events onto theirs.

Interface::

    fmt = chatformat.describe(template_source)            # per model, cached (tool format, thinking tags)
    parser = ChatStreamParser(fmt, tools=frozenset(names) or None,
                              think=True, in_thinking=fmt.starts_in_thinking(prompt))
    for piece in model_output_stream:
        for event in parser.feed(piece): ...               # ContentDelta | ThinkingDelta | ToolCall
    for event in parser.finish(truncated=cut): ...         # what was held back, at the end
    reply = parse_reply(fmt, text, ...)                    # the same, all at once (non-streaming)

Events come in output order. :class:`ToolCall` carries a stable ``id`` (``call_<hex>``, made once
when the call is parsed: stream and final message agree), its ``index`` among the reply's calls,
the tool ``name`` and the ``arguments`` as a dict. Text before, between and after calls is
never lost: it comes out as :class:`ContentDelta`.

What counts as a call (only with ``tools`` given, and only naming one of them):
``<tool_call>{json}</tool_call>`` (Qwen/Hermes; the closing tag may be missing at the end),
a bare JSON object or list of objects at the start of the reply or right after another call
(``{"name": ..., "arguments"|"parameters": {...}}``, OpenAI's ``{"function": {...}}`` shape, in a
```` ```json ```` fence too), ``<|python_tag|>{json}`` (Llama 3.x) and ``[TOOL_CALLS][{json}, ...]``
(Mistral). A bare call names its tool first: it opens with ``{"name": "<tool>"``,
``{"function": {"name": "<tool>"`` or ``{"type": "function", ...`` (whitespace aside). Text that
looks like a call but is not one is released as content.

Reasoning (with ``think``): text inside the format's tags (``<think>...</think>``) at the start
of the reply, or from the start when the prompt left a block open (``in_thinking``), comes out
as :class:`ThinkingDelta`; the tags themselves are dropped.

Streaming holds back only what may still turn into a tag or a call: a partial tag at the end of
the text, or a reply whose JSON so far can still open a call to an offered tool (``{"na`` is held,
``{"answer"`` or ``{"name": "Alice"`` is released at once), until it is decided.

An output cut by the token limit (``finish(truncated=True)``) ends without the call it had opened
and not finished: a half-written call is neither a call nor answer text. The API then says the
reply was cut (``length``, ``max_tokens``, ``incomplete``), not that it called a tool.
"""

from __future__ import annotations

import enum
import json

from ..jsontypes import JSONObject, JSONValue, loads
from .events import ChatEvent, ContentDelta, Reply, ThinkingDelta, ToolCall, collect
from .format import ChatFormat, ToolFormat

_FENCE = "```"


class _State(enum.Enum):
    START = "start"          # at the start of the answer (or right after a call): nothing decided
    THINKING = "thinking"    # inside a reasoning block
    CONTENT = "content"      # plain answer text
    CALL = "call"            # holding text that may be a call


class ChatStreamParser:
    """Incremental parser for one reply. Not thread-safe; one per generation.

    ``tools``: names of the tools the request offered (None: no call parsing at all).
    ``think``: split reasoning blocks (needs ``fmt.thinking``). ``in_thinking``: the prompt ended
    inside an open reasoning block, so the output starts as reasoning.
    """

    def __init__(self, fmt: ChatFormat, *, tools: frozenset[str] | None = None, think: bool = False,
                 in_thinking: bool = False) -> None:
        self._names = tools
        tags = fmt.thinking if think else None
        self._open = tags.open if tags else None
        self._close = tags.close if tags else ""
        self._tags: tuple[str, ...] = fmt.tools.tags if fmt.tools is not ToolFormat.NONE else ("<tool_call>",)
        self._state = _State.THINKING if (in_thinking and tags) else _State.START
        self._buf = ""
        self._bare_ok = True        # a bare JSON call may still come (nothing else was said yet)
        self._after_block = False   # START follows a reasoning block or a call (drop its blank lines)
        self._think_ok = tags is not None  # a reasoning block may still open
        self._count = 0
        self._scan = _JsonScan()    # progress through the JSON block being decided (state CALL)
        self._heads = _call_heads(tools or frozenset())
        self._truncated = False     # finish(truncated=True): the token limit cut the output

    def feed(self, text: str) -> list[ChatEvent]:
        """Events that ``text`` (the next piece of output) completes."""
        self._buf += text
        return self._drain(final=False)

    def finish(self, truncated: bool = False) -> list[ChatEvent]:
        """Everything still held, decided now that the output has ended.

        ``truncated``: the token limit cut the output, so what was held because it may have been
        the start of a call (an unfinished call, a partial tag) is dropped instead of released.
        """
        self._truncated = truncated
        return self._drain(final=True)

    # -- the state machine ---------------------------------------------------------------------

    def _drain(self, final: bool) -> list[ChatEvent]:
        out: list[ChatEvent] = []
        step = {_State.START: self._start, _State.THINKING: self._thinking, _State.CONTENT: self._content,
                _State.CALL: self._call}
        while self._buf and step[self._state](out, final):
            pass
        if final:
            self._buf = ""
        return out

    def _start(self, out: list[ChatEvent], final: bool) -> bool:
        """Decide: reasoning, a call, or content. Whitespace after a reasoning block or a call is
        dropped (models separate them with blank lines); at the very start it is kept (a completion
        may well begin with a space)."""
        head = self._buf.lstrip()
        if not head:
            if final:
                if not self._after_block:
                    _emit(out, ContentDelta(self._buf))
                self._buf = ""
            return False
        if self._open is not None and self._think_ok:
            if head.startswith(self._open):
                self._buf, self._state, self._think_ok = head[len(self._open):], _State.THINKING, False
                return True
            if self._open.startswith(head) and not final:
                return False
        self._think_ok = False
        text = head if self._after_block else self._buf
        if self._names is not None:
            starts = self._tags + ((_FENCE, "{", "[") if self._bare_ok else ())
            if any(s.startswith(head) and s != head for s in starts) and (not final or self._truncated):
                return False  # too short to tell ("[" may be "[TOOL_CALLS]"); cut off there: dropped
            if any(head.startswith(s) for s in starts):
                self._buf, self._state = head, _State.CALL
                return True
        self._buf, self._state = text, _State.CONTENT
        return True

    def _thinking(self, out: list[ChatEvent], final: bool) -> bool:
        i = self._buf.find(self._close)
        if i >= 0:
            _emit(out, ThinkingDelta(self._buf[:i]))
            self._buf, self._state, self._after_block = self._buf[i + len(self._close):], _State.START, True
            return True
        keep = 0 if final else _partial_suffix(self._buf, (self._close,))
        _emit(out, ThinkingDelta(self._buf[:len(self._buf) - keep]))
        self._buf = self._buf[len(self._buf) - keep:]
        return False

    def _content(self, out: list[ChatEvent], final: bool) -> bool:
        if self._names is None:
            _emit(out, ContentDelta(self._buf))
            self._buf = ""
            return False
        found = [i for i in (self._buf.find(t) for t in self._tags) if i >= 0]
        if found:
            i = min(found)
            _emit(out, ContentDelta(self._buf[:i]))
            self._buf, self._state = self._buf[i:], _State.CALL
            return True
        keep = 0 if final and not self._truncated else _partial_suffix(self._buf, self._tags)
        _emit(out, ContentDelta(self._buf[:len(self._buf) - keep]))
        self._buf = self._buf[len(self._buf) - keep:]  # at the end, _drain drops it
        self._bare_ok = False
        return False

    def _call(self, out: list[ChatEvent], final: bool) -> bool:
        """``_buf`` starts with a tag, a fence or a JSON opener: cut one block and decide it.

        Cut by the token limit inside the block: it is a call if what was written already is one
        (a closing tag was all that was missing), else it is dropped.
        """
        cut = final and self._truncated
        block = _cut_block(self._buf, self._tags, self._heads, self._scan, final and not cut)
        unfinished = block is None and cut
        if unfinished:
            block = _cut_block(self._buf, self._tags, self._heads, self._scan, True)
        if block is None:
            return False  # incomplete: wait for more output
        self._scan = _JsonScan()
        text, body, rest = block
        calls = _calls(body, self._names or frozenset()) if body is not None else None
        if calls:
            for name, arguments in calls:
                out.append(ToolCall(name, arguments, self._count))
                self._count += 1
            self._buf, self._state, self._bare_ok, self._after_block = rest, _State.START, True, True
        else:
            if not unfinished:
                _emit(out, ContentDelta(text))
            self._buf, self._state, self._bare_ok = rest, _State.CONTENT, False
        return True


def _emit(out: list[ChatEvent], event: ContentDelta | ThinkingDelta) -> None:
    """Append ``event`` unless it is empty, merging it into a previous event of the same kind."""
    if not event.text:
        return
    if out and type(out[-1]) is type(event):
        previous = out[-1]
        assert isinstance(previous, (ContentDelta, ThinkingDelta))
        out[-1] = type(event)(previous.text + event.text)
    else:
        out.append(event)


def _partial_suffix(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest end of ``text`` that is a proper prefix of one of ``tags``."""
    best = 0
    for tag in tags:
        for n in range(min(len(tag) - 1, len(text)), best, -1):
            if tag.startswith(text[-n:]):
                best = n
                break
    return best


def _cut_block(buf: str, tags: tuple[str, ...], heads: tuple[str, ...], scan: _JsonScan,
               final: bool) -> tuple[str, str | None, str] | None:
    """Split ``buf`` into (block text, JSON body or None when it cannot be a call, rest).

    None: the block is not complete yet (never when ``final``). A bare or fenced JSON block that
    cannot open a call (``heads``, see :func:`_call_heads`) is decided at once: not a call.
    """
    if buf.startswith("<tool_call>"):
        end = buf.find("</tool_call>")
        if end < 0:
            return (buf, buf[len("<tool_call>"):], "") if final else None
        return buf[:end + len("</tool_call>")], buf[len("<tool_call>"):end], buf[end + len("</tool_call>"):]
    for tag in tags:
        if tag != "<tool_call>" and buf.startswith(tag):
            cut = scan.cut(buf, len(tag), final)
            if cut is None:
                return None
            return buf[:cut[1]], cut[0], buf[cut[1]:]
    if buf.startswith(_FENCE):
        return _cut_fence(buf, heads, final)
    if not scan.call_like:
        scan.call_like = _opens_call(buf, heads)
        if scan.call_like is False:
            return buf, None, ""
    cut = scan.cut(buf, 0, final)
    if cut is None:
        return None
    return buf[:cut[1]], cut[0], buf[cut[1]:]


def _cut_fence(buf: str, heads: tuple[str, ...], final: bool) -> tuple[str, str | None, str] | None:
    """A ```` ```json ```` fence holding a call; any other fence is content at once."""
    newline = buf.find("\n")
    if newline < 0:
        if final:
            return buf, None, ""
        return None if len(buf) < 16 else (buf, None, "")
    language = buf[3:newline].strip().lower()
    if language not in ("", "json"):
        return buf, None, ""
    inner = buf[newline + 1:]
    if _opens_call(inner, heads) is False:
        return buf, None, ""
    end = inner.find(_FENCE)
    if end < 0:
        return (buf, None, "") if final else None
    stop = newline + 1 + end + len(_FENCE)
    return buf[:stop], inner[:end], buf[stop:]


# How a bare call may open, whitespace removed (%s: the tool's name as a JSON string).
_CALL_SHAPES = ('{"name":%s', '{"function":{"name":%s', '{"type":"function","function":{"name":%s',
                '{"type":"function","name":%s')
_HEAD_SPAN = 512  # characters of a block read to decide whether it opens a call


def _call_heads(names: frozenset[str]) -> tuple[str, ...]:
    """Every way a bare call (or a list of calls) to one of ``names`` opens, whitespace removed."""
    quoted = ["".join(json.dumps(n, ensure_ascii=False).split()) for n in sorted(names)]
    return tuple(opener + shape % q for q in quoted for shape in _CALL_SHAPES for opener in ("", "["))


def _opens_call(text: str, heads: tuple[str, ...]) -> bool | None:
    """Whether JSON ``text`` opens a call: True (it does), False (it cannot), None (too short to tell).

    Whitespace is ignored, also inside strings: that can only hold text longer, never release a call.
    """
    compact = "".join(text[:_HEAD_SPAN].split())
    if any(compact.startswith(h) for h in heads):
        return True
    if any(h.startswith(compact) for h in heads) and len(text) < _HEAD_SPAN:
        return None
    return False


class _JsonScan:
    """Finds where a JSON value ends, scanning only the text added since the last call.

    The buffer it scans must only grow at the end while one block is being decided.
    ``call_like``: whether the block opens a call (:func:`_opens_call`), None until known.
    """

    __slots__ = ("call_like", "depth", "escaped", "first", "in_string", "pos")

    def __init__(self) -> None:
        self.call_like: bool | None = None
        self.first: int | None = None   # index of the opening bracket
        self.pos = 0
        self.depth = 0
        self.in_string = False
        self.escaped = False

    def cut(self, buf: str, start: int, final: bool) -> tuple[str | None, int] | None:
        """The JSON value at ``buf[start:]`` (after whitespace): (its text, end index).

        (None, len) when it cannot be JSON; None when it is not complete yet.
        """
        if self.first is None:
            i = start
            while i < len(buf) and buf[i].isspace():
                i += 1
            if i == len(buf):
                return (None, len(buf)) if final else None
            if buf[i] not in "{[":
                return None, len(buf)
            head = buf[i + 1:].lstrip()
            if not head and not final:
                return None
            if head and head[0] not in ('"', "}", "{", "]"):
                return None, len(buf)  # "{this is prose": not JSON, release it now
            self.first, self.pos = i, i
        for j in range(self.pos, len(buf)):
            c = buf[j]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return buf[self.first:j + 1], j + 1
        self.pos = len(buf)
        return (None, len(buf)) if final else None


def _calls(body: str, names: frozenset[str]) -> list[tuple[str, JSONObject]] | None:
    """The calls in a JSON text, or None when it is not (only) calls to offered tools."""
    try:
        value = loads(body)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [_as_call(item, names) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _as_call(obj: JSONValue, names: frozenset[str]) -> tuple[str, JSONObject] | None:
    if not isinstance(obj, dict):
        return None
    inner = obj.get("function")
    fn: JSONObject = inner if isinstance(inner, dict) else obj
    name = fn.get("name")
    args = fn.get("arguments", fn.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = loads(args) if args.strip() else {}
        except ValueError:
            return None
    if args is None:
        args = {}
    if not isinstance(name, str) or not isinstance(args, dict) or name not in names:
        return None
    return name, args


def parse_reply(fmt: ChatFormat, text: str, *, tools: frozenset[str] | None = None, think: bool = False,
                in_thinking: bool = False) -> Reply:
    """Parse a whole reply at once (the same result as streaming it through the parser)."""
    parser = ChatStreamParser(fmt, tools=tools, think=think, in_thinking=in_thinking)
    return collect(parser.feed(text) + parser.finish())
