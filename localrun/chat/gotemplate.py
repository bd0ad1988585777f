"""The subset of Go's text/template that Ollama Modelfile TEMPLATEs use.

Supported: text and ``{{ pipeline }}`` actions with ``{{-``/``-}}`` trimming, comments, ``if`` /
``else if`` / ``else``, ``range`` (with ``$i, $v :=`` and ``else``), ``with``, variables
(``$x := ...``, ``$x = ...``, ``$``), field chains (``.Messages``, ``$.System``, ``(...).Name``),
string/number/bool literals, pipes, and the functions ``and or not eq ne lt le gt ge len index
slice print printf println json``. Fields look up dict keys as written, then in snake_case
(``.ToolCalls`` finds ``tool_calls``, ``.Role`` finds ``role``). Missing fields are empty, like
Ollama's templates see zero values. Nothing here can reach files, attributes or code: values
are only dict lookups, list indexing and the functions above.

Blocks (``if``/``range``/``with``) and parentheses nest at most ``MAX_NESTING`` deep (a
:class:`~localrun.errors.TemplateLimit` naming the line), so neither the parser nor the renderer,
which recurse once per level, come near Python's recursion limit. Every problem of a template,
when it is parsed or rendered, is a :class:`~localrun.errors.TemplateError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import TemplateError, TemplateLimit
from .template_nesting import MAX_NESTING, too_deep

_ACTION_RE = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
_TOKEN_RE = re.compile(
    r"""\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*") | (?P<raw>`[^`]*`) |
    (?P<num>-?\d+(?:\.\d+)?) |
    (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*) | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.) |
    (?P<decl>:=) | (?P<op>[()|,=]) | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.X,
)
MAX_OUTPUT = 4_000_000  # characters: a runaway template is an error, not an OOM


class _Stop(Exception):
    """Raised at the cut point (``.Response``) when rendering the last turn of a legacy template."""


@dataclass(slots=True)
class _Node:
    kind: str                                     # text|action|if|range|with
    text: str = ""
    pipe: list[Any] = field(default_factory=list)  # parsed pipeline
    decl: list[str] = field(default_factory=list)  # variables declared by := (or assigned by =)
    assign: bool = False
    branches: list[tuple[list[Any], list[_Node]]] = field(default_factory=list)
    else_body: list[_Node] = field(default_factory=list)
    body: list[_Node] = field(default_factory=list)


def _tokenize(src: str, line: int) -> list[tuple[str, str]]:
    """The tokens of one action (at ``line``); its parentheses nest at most MAX_NESTING deep."""
    out, pos, depth = [], 0, 0
    src = src.strip()
    while pos < len(src):
        m = _TOKEN_RE.match(src, pos)
        if not m or m.end() == pos:
            raise TemplateError(f"template: cannot parse {src[pos:pos + 20]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        if kind == "op" and out[-1][1] in "()":
            depth += 1 if out[-1][1] == "(" else -1
            if depth > MAX_NESTING:
                raise too_deep("parentheses inside one another", line)
        pos = m.end()
        while pos < len(src) and src[pos].isspace():
            pos += 1
    return out


class _Parser:
    def __init__(self, source: str) -> None:
        self.items: list[tuple[str, Any]] = []  # ("text", str) | ("action", tokens)
        self.lines: dict[int, int] = {}  # item index of an action -> its line, for errors
        self.depth = 0  # blocks open while parsing
        pos, line, counted = 0, 1, 0
        for m in _ACTION_RE.finditer(source):
            line, counted = line + source.count("\n", counted, m.start()), m.start()
            text = source[pos:m.start()]
            if m.group(1):
                text = text.rstrip()
            if self.items and self.items[-1][0] == "rtrim":
                self.items.pop()
                text = text.lstrip()
            self.items.append(("text", text))
            inner = m.group(2).strip()
            if not (inner.startswith("/*") and inner.endswith("*/")):
                self.lines[len(self.items)] = line
                self.items.append(("action", _tokenize(inner, line)))
            if m.group(3):
                self.items.append(("rtrim", None))
            pos = m.end()
        text = source[pos:]
        if self.items and self.items[-1][0] == "rtrim":
            self.items.pop()
            text = text.lstrip()
        self.items.append(("text", text))
        self.i = 0

    def parse(self) -> list[_Node]:
        body, end = self._list()
        if end is not None:
            raise TemplateError(f"template: unexpected {{{{ {end[0][1]} }}}}")
        return body

    def _list(self) -> tuple[list[_Node], list[tuple[str, str]] | None]:
        nodes: list[_Node] = []
        while self.i < len(self.items):
            kind, value = self.items[self.i]
            self.i += 1
            if kind == "rtrim":
                continue
            if kind == "text":
                if value:
                    nodes.append(_Node("text", text=value))
                continue
            toks: list[tuple[str, str]] = value
            head = toks[0][1] if toks and toks[0][0] == "ident" else None
            if head in ("end", "else"):
                return nodes, toks
            if head in ("if", "with", "range"):
                nodes.append(self._block(head, toks[1:]))
            elif head in ("template", "block", "define"):
                raise TemplateError(f"template: {{{{ {head} }}}} is not supported")
            else:
                nodes.append(self._action(toks))
        return nodes, None

    def _action(self, toks: list[tuple[str, str]]) -> _Node:
        node = _Node("action")
        if len(toks) >= 2 and toks[0][0] == "var" and toks[1][0] in ("decl", "op") and toks[1][1] in (":=", "="):
            node.decl, node.assign, toks = [toks[0][1]], toks[1][1] == "=", toks[2:]
        node.pipe = _parse_pipeline(toks)
        return node

    def _block(self, kind: str, toks: list[tuple[str, str]]) -> _Node:
        self.depth += 1
        if self.depth > MAX_NESTING:
            line = self.lines.get(self.i - 1, 0)
            raise too_deep(f"blocks inside one another (the last {{{{ {kind} }}}})", line)
        node = self._range(toks) if kind == "range" else self._conditional(kind, toks)
        self.depth -= 1
        return node

    def _conditional(self, kind: str, toks: list[tuple[str, str]]) -> _Node:
        node = _Node(kind)
        cond = toks
        while True:
            body, end = self._list()
            if end is None:
                raise TemplateError(f"template: {{{{ {kind} }}}} without {{{{ end }}}}")
            node.branches.append((_parse_pipeline(cond), body))
            if end[0][1] == "end":
                return node
            rest = end[1:]
            if rest and rest[0] == ("ident", "if") and kind == "if":
                cond = rest[1:]
                continue
            node.else_body, end = self._list()
            if end is None or end[0][1] != "end":
                raise TemplateError(f"template: {{{{ else }}}} of {kind} without {{{{ end }}}}")
            return node

    def _range(self, toks: list[tuple[str, str]]) -> _Node:
        node = _Node("range")
        if any(t == ("decl", ":=") for t in toks):
            split = toks.index(("decl", ":="))
            node.decl = [t[1] for t in toks[:split] if t[0] == "var"]
            toks = toks[split + 1:]
        node.pipe = _parse_pipeline(toks)
        node.body, end = self._list()
        if end is None:
            raise TemplateError("template: {{ range }} without {{ end }}")
        if end[0][1] == "else":
            node.else_body, end = self._list()
            if end is None:
                raise TemplateError("template: {{ range }} without {{ end }}")
        return node


def _parse_pipeline(toks: list[tuple[str, str]]) -> list[Any]:
    """A pipeline is a list of commands; a command is a list of operands."""
    commands: list[list[Any]] = [[]]
    i = 0
    while i < len(toks):
        kind, value = toks[i]
        if value == "|" and kind == "op":
            commands.append([])
            i += 1
            continue
        operand, i = _parse_operand(toks, i)
        commands[-1].append(operand)
    if not commands[0]:
        raise TemplateError("template: empty action")
    return commands


def _parse_operand(toks: list[tuple[str, str]], i: int) -> tuple[Any, int]:
    kind, value = toks[i]
    if kind == "op" and value == "(":
        depth, j = 1, i + 1
        while j < len(toks) and depth:
            depth += {"(": 1, ")": -1}.get(toks[j][1], 0) if toks[j][0] == "op" else 0
            j += 1
        if depth:
            raise TemplateError("template: unclosed '('")
        inner = ("pipe", _parse_pipeline(toks[i + 1:j - 1]))
        if j < len(toks) and toks[j][0] == "field" and toks[j][1] != ".":
            return ("chain", inner, toks[j][1].split(".")[1:]), j + 1
        return inner, j
    if kind in ("str", "num"):
        return ("lit", _literal(kind, value)), i + 1
    if kind == "raw":
        return ("lit", value[1:-1]), i + 1
    if kind == "field":
        return ("field", [] if value == "." else value.split(".")[1:]), i + 1
    if kind == "var":
        return ("var", value), i + 1
    if kind == "ident":
        if value in ("true", "false"):
            return ("lit", value == "true"), i + 1
        if value == "nil":
            return ("lit", None), i + 1
        return ("func", value), i + 1
    raise TemplateError(f"template: unexpected {value!r}")


def _literal(kind: str, value: str) -> Any:
    """The value of a string or number token."""
    try:  # "\q" is no JSON escape; 5,000 digits are past Python's int conversion limit
        if kind == "str":
            return json.loads(value)
        return float(value) if "." in value else int(value)
    except ValueError as exc:
        raise TemplateError(f"template: bad literal {value[:20]!r}: {exc}") from None


def _truthy(value: Any) -> bool:
    return bool(value) if value is not None else False


def _lookup(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        for key in (name, name[:1].lower() + name[1:], re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()):
            if key in value:
                return value[key]
        return None
    return None


def _printf(fmt: str, *args: Any) -> str:
    values = iter(args)

    def sub(m: re.Match[str]) -> str:
        verb = m.group(1)
        if verb == "%":
            return "%"
        value = next(values, "")
        if verb == "q":
            return json.dumps(str(value))
        if verb == "d":
            return str(int(value))
        return _to_text(value)

    return re.sub(r"%[-+# 0-9.]*([svdqf%])", sub, fmt)


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _eq(a: Any, *others: Any) -> bool:
    return any(a == b for b in others)


def _slice(value: Any, *idx: Any) -> Any:
    start = int(idx[0]) if idx else 0
    stop = int(idx[1]) if len(idx) > 1 else None
    return value[start:stop]


_FUNCS: dict[str, Callable[..., Any]] = {
    "not": lambda v: not _truthy(v),
    "eq": _eq,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "len": lambda v: len(v) if v is not None else 0,
    "index": lambda v, *keys: _index(v, keys),
    "slice": _slice,
    "print": lambda *a: "".join(_to_text(x) for x in a),
    "println": lambda *a: " ".join(_to_text(x) for x in a) + "\n",
    "printf": _printf,
    "json": lambda v: json.dumps(v, ensure_ascii=False),
}


def _index(value: Any, keys: Sequence[Any]) -> Any:
    for key in keys:
        if isinstance(value, Mapping):
            value = value.get(key)
        elif isinstance(value, (list, tuple, str)) and isinstance(key, int):
            value = value[key] if -len(value) <= key < len(value) else None
        else:
            return None
    return value


class _Renderer:
    def __init__(self, root: Any, cut_at_response: bool) -> None:
        self.out: list[str] = []
        self.size = 0
        self.cut = cut_at_response
        self.scopes: list[dict[str, Any]] = [{"$": root}]

    def write(self, text: str) -> None:
        self.size += len(text)
        if self.size > MAX_OUTPUT:
            raise TemplateError("template output is too large")
        self.out.append(text)

    def run(self, nodes: list[_Node], dot: Any) -> None:
        for node in nodes:
            if node.kind == "text":
                self.write(node.text)
            elif node.kind == "action":
                value = self.pipe(node.pipe, dot)
                if node.decl:
                    self.set_var(node.decl[0], value, node.assign)
                else:
                    self.write(_to_text(value))
                    if self.cut and _is_response(node.pipe):
                        raise _Stop
            elif node.kind in ("if", "with"):
                for cond, body in node.branches:
                    value = self.pipe(cond, dot)
                    if _truthy(value):
                        self.scoped(body, value if node.kind == "with" else dot)
                        break
                else:
                    self.scoped(node.else_body, dot)
            elif node.kind == "range":
                self.range(node, dot)

    def range(self, node: _Node, dot: Any) -> None:
        value = self.pipe(node.pipe, dot)
        items = list(value.items()) if isinstance(value, Mapping) else list(enumerate(value or []))
        if not items:
            self.scoped(node.else_body, dot)
            return
        for key, item in items:
            self.scopes.append({})
            if len(node.decl) == 1:
                self.scopes[-1][node.decl[0]] = item
            elif len(node.decl) >= 2:
                self.scopes[-1][node.decl[0]] = key
                self.scopes[-1][node.decl[1]] = item
            try:
                self.run(node.body, item)
            finally:
                self.scopes.pop()

    def scoped(self, body: list[_Node], dot: Any) -> None:
        self.scopes.append({})
        try:
            self.run(body, dot)
        finally:
            self.scopes.pop()

    def set_var(self, name: str, value: Any, assign: bool) -> None:
        if assign:
            for scope in reversed(self.scopes):
                if name in scope:
                    scope[name] = value
                    return
            raise TemplateError(f"template: undefined variable {name}")
        self.scopes[-1][name] = value

    def get_var(self, name: str) -> Any:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise TemplateError(f"template: undefined variable {name}")

    def pipe(self, commands: list[list[Any]], dot: Any) -> Any:
        value: Any = None
        for n, command in enumerate(commands):
            extra = [value] if n else []
            value = self.command(command, dot, extra)
        return value

    def command(self, operands: list[Any], dot: Any, extra: list[Any]) -> Any:
        head = operands[0]
        if head[0] == "func":
            name = head[1]
            if name in ("and", "or"):
                return self.logic(name, operands[1:], dot, extra)
            func = _FUNCS.get(name)
            if func is None:
                raise TemplateError(f"template: function {name!r} is not supported")
            args = [self.operand(o, dot) for o in operands[1:]] + extra
            try:
                return func(*args)
            except TemplateError:
                raise
            except Exception as exc:
                raise TemplateError(f"template: {name}: {exc}") from exc
        if len(operands) > 1 or extra:
            raise TemplateError("template: cannot call a non-function")
        return self.operand(head, dot)

    def logic(self, name: str, operands: list[Any], dot: Any, extra: list[Any]) -> Any:
        value: Any = None
        for operand in operands:
            value = self.operand(operand, dot)
            if _truthy(value) == (name == "or"):
                return value
        for value in extra:
            if _truthy(value) == (name == "or"):
                return value
        return value

    def operand(self, op: Any, dot: Any) -> Any:
        kind = op[0]
        if kind == "lit":
            return op[1]
        if kind == "field":
            return _walk(dot, op[1])
        if kind == "var":
            name, _, rest = op[1].partition(".")
            return _walk(self.get_var(name), rest.split(".") if rest else [])
        if kind == "pipe":
            return self.pipe(op[1], dot)
        if kind == "chain":
            return _walk(self.operand(op[1], dot), op[2])
        if kind == "func":
            return self.command([op], dot, [])
        raise TemplateError(f"template: bad operand {op!r}")


def _walk(value: Any, names: Sequence[str]) -> Any:
    for name in names:
        value = _lookup(value, name)
    return value


def _is_response(pipe: list[list[Any]]) -> bool:
    return len(pipe) == 1 and len(pipe[0]) == 1 and pipe[0][0] == ("field", ["Response"])


class GoTemplate:
    """A parsed Go template; :meth:`render` evaluates it against plain dicts and lists."""

    def __init__(self, source: str) -> None:
        """Parse ``source``; TemplateError (TemplateLimit past a bound) for any problem in it."""
        self.source = source
        try:
            self._nodes = _Parser(source).parse()
        except RecursionError:  # not expected within MAX_NESTING: a backstop, still the template's problem
            raise TemplateLimit("template nests too deeply to parse") from None
        self.uses_messages = ".Messages" in source

    def execute(self, values: Mapping[str, Any], *, cut_at_response: bool = False) -> str:
        """Render with ``values`` as the dot. With ``cut_at_response`` output ends after the
        first ``{{ .Response }}`` (how Ollama renders the last turn of a prompt/response template)."""
        renderer = _Renderer(values, cut_at_response)
        try:
            renderer.run(self._nodes, values)
        except _Stop:
            pass
        except RecursionError:
            raise TemplateLimit("template nests too deeply to render") from None
        return "".join(renderer.out)
