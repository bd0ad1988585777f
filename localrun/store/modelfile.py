"""Modelfiles: parse the instructions Ollama users write, and render one back.

Grammar (keywords and parameter names are case-insensitive)::

    # comment
    FROM <store name | hf.co/user/repo[:quant] | path/to/model.gguf>
    FROM <path/to/mmproj.gguf>          (a second FROM: a vision model's projector, as Ollama's)
    PARAMETER <name> <value>            (stop is repeatable)
    TEMPLATE <value>    SYSTEM <value>    ADAPTER <path>    LICENSE <value> (repeatable)
    MESSAGE <system|user|assistant|tool> <value>

A value is the rest of the line, a ``"quoted"`` string (escapes ``\\" \\\\ \\n \\r \\t``) or a
``\"\"\"`` block that may span lines. The parser is an explicit state machine
(:class:`_State`: between instructions, or inside a ``\"\"\"`` block); every error carries the
line number and says what was expected. :func:`render` prints a Modelfile that parses back to an
equal :class:`Modelfile`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..errors import ModelfileError, OptionError
from ..jsontypes import JSONObject
from ..parameters import LIST_PARAMS, PARAMETERS, kind_of, parse_value

INSTRUCTIONS = ("FROM", "PARAMETER", "TEMPLATE", "SYSTEM", "ADAPTER", "LICENSE", "MESSAGE")
ROLES = ("system", "user", "assistant", "tool")
TRIPLE = '"""'



@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str


@dataclass(slots=True)
class Modelfile:
    """A parsed Modelfile. ``parameters`` holds typed values; ``stop`` is a list of strings."""

    from_: str
    parameters: JSONObject = field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    adapter: str | None = None
    projector: str | None = None  # a second FROM: the vision projector (mmproj) GGUF
    licenses: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)


def parse_parameter(name: str, raw: str, line: int | None = None) -> int | float | bool | str:
    """Convert one PARAMETER value to its type (the rules of :mod:`localrun.parameters`); raises
    ModelfileError naming what was expected."""
    key = name.lower()
    kind = kind_of(key)
    if kind is None:
        raise ModelfileError(f"unknown parameter {name!r}; expected one of: {', '.join(PARAMETERS)}", line)
    if kind is list:
        if raw == "":
            raise ModelfileError("PARAMETER stop needs a non-empty string", line)
        return raw
    try:
        return parse_value(key, raw)
    except OptionError as exc:
        raise ModelfileError(f"parameter {key!r} {exc}", line) from None


class _State(enum.Enum):
    INSTRUCTION = "instruction"   # between instructions: expect a keyword, a comment or a blank line
    BLOCK = "block"               # inside a """ value, collecting lines until the closing """


@dataclass(slots=True)
class _Pending:
    """An instruction whose value is still being read (a \"\"\" block)."""

    keyword: str
    arg: str | None      # PARAMETER name or MESSAGE role
    line: int            # where the instruction started
    parts: list[str]


def _split_word(text: str) -> tuple[str, str]:
    """First whitespace-separated word and the (stripped) rest."""
    parts = text.split(None, 1)
    if not parts:
        return "", ""
    return parts[0], parts[1].strip() if len(parts) > 1 else ""


def _unquote(text: str, line: int) -> str:
    """Parse a ``"..."`` value that fills ``text`` exactly (escapes \\" \\\\ \\n \\t)."""
    out: list[str] = []
    i = 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append({"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}.get(nxt, "\\" + nxt))
            i += 2
            continue
        if c == '"':
            if text[i + 1:].strip():
                raise ModelfileError(f"unexpected text after the closing quote: {text[i + 1:].strip()!r}", line)
            return "".join(out)
        out.append(c)
        i += 1
    raise ModelfileError('unterminated quoted value; expected a closing "', line)


class _Parser:
    def __init__(self) -> None:
        self.state = _State.INSTRUCTION
        self.pending: _Pending | None = None
        self.from_: tuple[str, int] | None = None
        self.result = Modelfile(from_="")
        self.seen: dict[str, int] = {}

    def feed(self, lineno: int, line: str) -> None:
        if self.state is _State.BLOCK:
            self._block_line(lineno, line)
            return
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            return
        word, rest = _split_word(stripped)
        keyword = word.upper()
        if keyword not in INSTRUCTIONS:
            raise ModelfileError(
                f"unknown instruction {word!r}; expected one of {', '.join(INSTRUCTIONS)} (or a # comment)", lineno
            )
        rest = rest.strip()
        arg: str | None = None
        if keyword in ("PARAMETER", "MESSAGE"):
            arg, rest = _split_word(rest)
            if not arg or not rest:
                example = "PARAMETER temperature 0.7" if keyword == "PARAMETER" else "MESSAGE user Hello"
                raise ModelfileError(f"{keyword} needs a name and a value, e.g. '{example}'", lineno)
        elif not rest:
            raise ModelfileError(f"{keyword} needs a value", lineno)
        if rest.startswith(TRIPLE):
            body = rest[3:]
            end = body.find(TRIPLE)
            if end >= 0:
                self._value_block_end(body, end, keyword, arg, lineno, lineno)
            else:
                self.pending = _Pending(keyword, arg, lineno, [body])
                self.state = _State.BLOCK
            return
        value = _unquote(rest, lineno) if rest.startswith('"') else rest
        self.apply(keyword, arg, value, lineno)

    def _value_block_end(self, text: str, end: int, keyword: str, arg: str | None, start: int, lineno: int) -> None:
        trailing = text[end + 3:].strip()
        if trailing:
            raise ModelfileError(f'unexpected text after the closing """: {trailing!r}', lineno)
        self.apply(keyword, arg, text[:end], start)

    def _block_line(self, lineno: int, line: str) -> None:
        assert self.pending is not None
        end = line.find(TRIPLE)
        if end < 0:
            self.pending.parts.append(line)
            return
        pending, self.pending, self.state = self.pending, None, _State.INSTRUCTION
        text = "\n".join([*pending.parts, line])
        self._value_block_end(text, len(text) - len(line) + end, pending.keyword, pending.arg, pending.line, lineno)

    def finish(self, last_line: int) -> Modelfile:
        if self.state is _State.BLOCK:
            assert self.pending is not None
            raise ModelfileError(
                f'unterminated """ value of {self.pending.keyword} opened on line {self.pending.line}; '
                'expected a closing """',
                last_line,
            )
        if self.from_ is None:
            raise ModelfileError("no FROM instruction; a Modelfile needs 'FROM <model name or path to a .gguf>'")
        return self.result

    def _once(self, keyword: str, lineno: int) -> None:
        if keyword in self.seen:
            raise ModelfileError(f"{keyword} given twice (first on line {self.seen[keyword]}); expected it once",
                                 lineno)
        self.seen[keyword] = lineno

    def apply(self, keyword: str, arg: str | None, value: str, lineno: int) -> None:
        r = self.result
        if keyword == "FROM":
            if not value.strip():
                raise ModelfileError("FROM needs a model name or a path to a .gguf file", lineno)
            if self.from_ is None:
                self.from_ = (value.strip(), lineno)
                r.from_ = value.strip()
                return
            if r.projector is not None:
                raise ModelfileError("FROM given three times; expected the model and at most one vision "
                                     "projector (mmproj .gguf)", lineno)
            r.projector = value.strip()
        elif keyword == "PARAMETER":
            assert arg is not None
            key = arg.lower()
            typed = parse_parameter(key, value, lineno)
            if key in LIST_PARAMS:
                listed = r.parameters.setdefault(key, [])
                assert isinstance(listed, list)  # a list parameter is only ever set here, as a list
                listed.append(typed)
            else:
                r.parameters[key] = typed
        elif keyword == "TEMPLATE":
            self._once(keyword, lineno)
            r.template = value
        elif keyword == "SYSTEM":
            self._once(keyword, lineno)
            r.system = value
        elif keyword == "ADAPTER":
            self._once(keyword, lineno)
            if not value.strip():
                raise ModelfileError("ADAPTER needs a path to a LoRA adapter .gguf", lineno)
            r.adapter = value.strip()
        elif keyword == "LICENSE":
            r.licenses.append(value)
        elif keyword == "MESSAGE":
            assert arg is not None
            role = arg.lower()
            if role not in ROLES:
                raise ModelfileError(f"MESSAGE role must be one of {', '.join(ROLES)}, got {arg!r}", lineno)
            r.messages.append(Message(role, value))


def parse(text: str) -> Modelfile:
    """Parse Modelfile text; raises ModelfileError with the line number on any problem."""
    if "\x00" in text:
        raise ModelfileError("the Modelfile contains a NUL byte; expected text")
    parser = _Parser()
    # Only \n (and \r\n) end a line: other Unicode line breaks are ordinary text in values.
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for lineno, line in enumerate(lines, start=1):
        parser.feed(lineno, line)
    return parser.finish(max(len(lines), 1))


def quote(value: str) -> str:
    """Render a value so that the parser reads back exactly ``value``."""
    if _triple_ok(value) and ("\n" in value or value != value.strip()):
        return TRIPLE + value + TRIPLE
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
               .replace("\t", "\\t"))
    return f'"{escaped}"'


def _format_param(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)  # shortest text that reads back to the same float
        return text[:-2] if text.endswith(".0") else text
    if isinstance(value, int):
        return str(value)
    return quote(str(value))


def render(mf: Modelfile, header: str | None = None) -> str:
    """A Modelfile text that :func:`parse` reads back to a Modelfile equal to ``mf``."""
    out: list[str] = []
    if header:
        out.extend(f"# {line}" if line else "#" for line in header.splitlines())
    from_ = mf.from_
    out.append(f"FROM {quote(from_) if from_ != from_.strip() or from_.startswith(chr(34)) else from_}")
    if mf.projector is not None:
        out.append(f"FROM {quote(mf.projector) if mf.projector.startswith(chr(34)) else mf.projector}")
    if mf.adapter is not None:
        out.append(f"ADAPTER {quote(mf.adapter) if mf.adapter.startswith(chr(34)) else mf.adapter}")
    if mf.template is not None:
        out.append(f"TEMPLATE {TRIPLE}{mf.template}{TRIPLE}" if _triple_ok(mf.template)
                   else f"TEMPLATE {quote(mf.template)}")
    if mf.system is not None:
        out.append(f"SYSTEM {TRIPLE}{mf.system}{TRIPLE}" if _triple_ok(mf.system) else f"SYSTEM {quote(mf.system)}")
    for key in sorted(mf.parameters):
        value = mf.parameters[key]
        for item in value if isinstance(value, list) else [value]:
            out.append(f"PARAMETER {key} {_format_param(item)}")
    for lic in mf.licenses:
        out.append(f"LICENSE {TRIPLE}{lic}{TRIPLE}" if _triple_ok(lic) else f"LICENSE {quote(lic)}")
    for m in mf.messages:
        out.append(f"MESSAGE {m.role} {quote(m.content)}")
    return "\n".join(out) + "\n"


def _triple_ok(value: str) -> bool:
    # The parser strips the line that opens a block, so whitespace ending the value's first line
    # would be lost inside """...""": such values take the escaped single-line form instead.
    first, newline, _ = value.partition("\n")
    return (TRIPLE not in value and not value.endswith('"') and value != "" and "\r" not in value
            and not (newline and first != first.rstrip()))
