"""How much grammar a JSON-schema ``pattern`` becomes, measured before llama.cpp ever sees it.

llama-cpp-python's schema converter expands every counted repetition of a pattern into copies of
its body, and llama.cpp's grammar sampler keeps one parse stack per way the output so far can be
matched. ``^(a?){2000}a{2000}$`` passed validation and became 2,000 optional copies: after a few
``a`` s there are thousands of stacks, each checked against the whole vocabulary at every token, so
one sampling step took minutes (measured here: ``(a?){256}`` produced one token in 40 s on Gemma's
262k vocabulary and did not stop within 120 s of its cancel; ``(a?){64}`` cost about what a plain
``[a-z]+`` does).

:func:`check_pattern` parses the regex subset the converter accepts (literals, escapes, classes,
``.``, groups, ``|``, ``* + ? {m} {m,} {m,n}``, anchors) and refuses, with a GrammarError naming
the construct:

- a part that can match nothing repeated more than ``MAX_NULLABLE_REPEAT`` times, or without bound
  (``(a?){2000}``, ``(a*)*``): the ambiguous shapes whose stacks multiply;
- more than ``MAX_OPTIONAL`` optional copies from one ``{m,n}`` (llama.cpp nests one group per copy);
- patterns expanding to more than ``MAX_ATOMS`` elements in all, or nesting deeper than ``MAX_DEPTH``.

Real patterns (dates, identifiers, ``^[a-z0-9_]{3,32}$``, phone numbers) are far inside these bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import GrammarError

MAX_ATOMS = 4096
MAX_OPTIONAL = 1000
MAX_NULLABLE_REPEAT = 16
MAX_DEPTH = 32
_MAX_COUNT_DIGITS = 6


@dataclass(frozen=True, slots=True)
class _Shape:
    atoms: int       # elements once every repetition is expanded (capped at MAX_ATOMS + 1)
    nullable: bool   # can match the empty string


def _cap(n: int) -> int:
    return min(n, MAX_ATOMS + 1)


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.s = pattern
        self.i = 0

    def fail(self, message: str) -> GrammarError:
        return GrammarError(f"JSON schema pattern {self.s[:80]!r}: {message}")

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def alternation(self, depth: int) -> _Shape:
        if depth > MAX_DEPTH:
            raise self.fail(f"groups nest deeper than {MAX_DEPTH} levels")
        shapes = [self.sequence(depth)]
        while self.peek() == "|":
            self.i += 1
            shapes.append(self.sequence(depth))
        return _Shape(_cap(sum(x.atoms for x in shapes)), any(x.nullable for x in shapes))

    def sequence(self, depth: int) -> _Shape:
        atoms, nullable = 0, True
        while self.peek() not in ("", "|", ")"):
            shape = self.quantified(self.atom(depth))
            atoms, nullable = _cap(atoms + shape.atoms), nullable and shape.nullable
        return _Shape(atoms, nullable)

    def atom(self, depth: int) -> _Shape:
        c = self.peek()
        self.i += 1
        if c == "(":
            if self.s.startswith("?:", self.i):
                self.i += 2
            inner = self.alternation(depth + 1)
            if self.peek() != ")":
                raise self.fail("a group is not closed")
            self.i += 1
            return inner
        if c == "[":
            self.skip_class()
            return _Shape(1, False)
        if c == "\\":
            self.i += 1
            return _Shape(1, False)
        if c in "^$":
            return _Shape(0, True)
        if c in "*+?{":
            raise self.fail(f"a quantifier {c!r} with nothing to repeat")
        return _Shape(1, False)

    def skip_class(self) -> None:
        if self.peek() == "^":
            self.i += 1
        if self.peek() == "]":
            self.i += 1
        while self.peek() not in ("", "]"):
            self.i += 2 if self.peek() == "\\" else 1
        if self.peek() != "]":
            raise self.fail("a character class is not closed")
        self.i += 1

    def count(self) -> int:
        start = self.i
        while self.peek().isdigit():
            self.i += 1
        digits = self.s[start:self.i]
        if not digits or len(digits) > _MAX_COUNT_DIGITS:
            raise self.fail(f"repetition count {digits or '(none)'!r} is not a number "
                            f"up to {10 ** _MAX_COUNT_DIGITS - 1}")
        return int(digits)

    def quantified(self, body: _Shape) -> _Shape:
        c = self.peek()
        if c not in ("*", "+", "?", "{"):
            return body
        self.i += 1
        low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(c, (0, 0))
        if c == "{":
            low = high = self.count()
            if self.peek() == ",":
                self.i += 1
                high = self.count() if self.peek().isdigit() else None
            if self.peek() != "}":
                raise self.fail("a {m,n} repetition is not closed")
            self.i += 1
            if high is not None and high < low:
                raise self.fail(f"repetition {{{low},{high}}} has its bounds reversed")
        if self.peek() == "?":  # lazy: the same language
            self.i += 1
        return self.repeat(body, low, high)

    def repeat(self, body: _Shape, low: int, high: int | None) -> _Shape:
        if body.nullable and (high is None or high > MAX_NULLABLE_REPEAT):
            times = "without bound" if high is None else f"{high} times"
            raise self.fail(f"repeats a part that can match nothing {times} (at most {MAX_NULLABLE_REPEAT}; "
                            "such patterns make constrained sampling explode)")
        if high is not None and high - low > MAX_OPTIONAL:
            raise self.fail(f"{{{low},{high}}} makes {high - low} optional copies (at most {MAX_OPTIONAL})")
        copies = low + 1 if high is None else high
        return _Shape(_cap(body.atoms * copies), body.nullable or low == 0)


def check_pattern(pattern: str) -> None:
    """Raise GrammarError when ``pattern`` would expand into a grammar too costly to sample."""
    parser = _Parser(pattern)
    shape = parser.alternation(0)
    if parser.i != len(pattern):
        raise parser.fail(f"unexpected {pattern[parser.i]!r} at position {parser.i}")
    if shape.atoms > MAX_ATOMS:
        raise parser.fail(f"it expands to more than {MAX_ATOMS} elements once repetitions are written out")
