"""Bounds on what a Jinja2 chat template may compute, checked before the work is done.

Chat templates come from strangers (a GGUF's ``tokenizer.chat_template``, a Modelfile, a request's
``template``). The immutable sandbox stops them from reaching Python internals, but not from
computing: ``{{ (9 ** 15000000) % 7 }}`` is folded by Jinja's *compiler*, holding the GIL for
minutes; ``'a' * 1200000000`` allocates a gigabyte; nested ``range(100000)`` loops run for hours.
:class:`BoundedSandbox` closes those doors in the template engine itself:

- **no compile-time evaluation**: the optimizer is off and :class:`_NoFoldCodeGenerator` folds only
  literal text, so compiling a template never runs any of its expressions;
- **arithmetic and repetition**: ``*``, ``**``, ``+``, ``%`` and ``//`` are intercepted; a result
  of more than ``MAX_INT_BITS`` bits or a string or list longer than ``MAX_ITEMS`` is refused
  before it is computed (``~`` concatenations are checked as they are built);
- **sized operations**: ``center``/``indent``/``format``/``batch``/``slice`` filters and the string
  methods ``center``/``ljust``/``rjust``/``zfill``/``expandtabs``/``replace``/``join`` check the
  size of their result first;
- **a step budget** per render: every loop iteration and every call (macros included) costs one
  step; past ``MAX_STEPS`` the render stops;
- **nesting**: blocks, brackets and chains nest at most as deep as :mod:`.template_nesting` allows,
  checked before the parser or the compiler recurse into them.

Each refusal is a :class:`~localrun.errors.TemplateLimit` naming the bound. Real templates (Llama,
Qwen, Gemma, Mistral) stay far inside every bound: a 100-message conversation with tools takes a few
thousand steps. These checks make a hostile template fail fast with a clear message; they are not
the last line: the daemon also renders in a child process with CPU, memory and wall-time limits
(:mod:`localrun.runtime.bounded`), which catches whatever a check here misses.
"""

from __future__ import annotations

import contextvars
import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.lexer import TokenStream
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import TemplateLimit
from .template_nesting import check_tree_depth, checked_tokens

MAX_STEPS = 1_000_000      # loop iterations + calls in one render
MAX_ITEMS = 1_000_000      # characters of a string / items of a list built by an operator
MAX_INT_BITS = 4096        # bits of an integer built by arithmetic
MAX_SOURCE = 1_000_000     # characters of template source (real ones are a few kilobytes)
_FORMAT_WIDTH = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_SIZED = (str, list, tuple)


class _Steps:
    """The step counter of one render (held in a context variable, so renders in threads don't share)."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_STEPS

    def charge(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise TemplateLimit(f"chat template ran more than {MAX_STEPS:,} loop iterations and calls")


_STEPS: contextvars.ContextVar[_Steps | None] = contextvars.ContextVar("template_steps", default=None)


def _charge(n: int = 1) -> None:
    steps = _STEPS.get()
    if steps is not None:
        steps.charge(n)


def _too_big(what: str, size: int, limit: int = MAX_ITEMS) -> TemplateLimit:
    return TemplateLimit(f"chat template exceeds a limit: {what} would be {size:,} (at most {limit:,})")


def _check_len(value: Any) -> Any:
    if isinstance(value, _SIZED) and len(value) > MAX_ITEMS:
        raise _too_big("a value's length", len(value))
    return value


def _int_bits(value: Any) -> int:
    return abs(value).bit_length() if isinstance(value, int) else 0


def _check_binop(op: str, left: Any, right: Any) -> None:
    """Refuse ``left op right`` when its result would be too large, before computing it."""
    if op == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, _SIZED) and isinstance(times, int) and len(seq) * max(0, times) > MAX_ITEMS:
                raise _too_big("a repeated value's length", len(seq) * times)
        if _int_bits(left) + _int_bits(right) > MAX_INT_BITS:
            raise _too_big("a product's size in bits", _int_bits(left) + _int_bits(right), MAX_INT_BITS)
    elif op == "**":
        if isinstance(right, int) and isinstance(left, int) and abs(left) > 1 and right > 0:
            bits = math.log2(abs(left)) * right
            if bits > MAX_INT_BITS:
                raise _too_big("a power's size in bits", int(bits), MAX_INT_BITS)
    elif op == "+":
        if isinstance(left, _SIZED) and isinstance(right, _SIZED) and len(left) + len(right) > MAX_ITEMS:
            raise _too_big("a concatenation's length", len(left) + len(right))
    elif op == "%" and isinstance(left, str):
        _check_format(left)


def _check_format(fmt: str) -> None:
    """``'%1000000000s' % x`` pads to a gigabyte: refuse widths and precisions beyond MAX_ITEMS."""
    for width, precision in _FORMAT_WIDTH.findall(fmt):
        for number in (width, precision):
            if number.isdigit() and int(number) > MAX_ITEMS:
                raise _too_big("a formatted field's width", int(number))


def _estimate_str_call(name: str, obj: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The length of ``obj.name(*args)`` for the methods whose result can dwarf their input."""
    values = list(args) + list(kwargs.values())
    first = values[0] if values else None
    if name in ("center", "ljust", "rjust", "zfill") and isinstance(first, int):
        return max(len(obj), first)
    if name == "expandtabs":
        return len(obj) * (first if isinstance(first, int) else 8)
    if name == "replace" and len(values) >= 2 and isinstance(first, str) and isinstance(values[1], str):
        hits = obj.count(first) if first else len(obj) + 1
        return len(obj) + hits * len(values[1])
    if name == "join" and isinstance(first, (list, tuple)):
        return len(obj) * max(0, len(first) - 1) + sum(len(x) for x in first if isinstance(x, str))
    return 0


class _NoFoldCodeGenerator(CodeGenerator):
    """Never evaluates template expressions while compiling; checks ``~`` results as they are built."""

    def _output_child_to_const(self, node: nodes.Expr, frame: Frame, finalize: Any) -> str:
        if not isinstance(node, nodes.TemplateData):
            raise nodes.Impossible()
        return super()._output_child_to_const(node, frame, finalize)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.checked(")
        super().visit_Concat(node, frame)
        self.write(")")

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        # Every iteration costs a step: wrap the iterable (environment.* cannot be shadowed by a template).
        if not getattr(node, "_counted", False):
            node.iter = nodes.Call(nodes.EnvironmentAttribute("counted"), [node.iter], [], None, None,
                                   lineno=node.lineno)
            node._counted = True  # type: ignore[attr-defined]
        super().visit_For(node, frame)


class BoundedTemplate(jinja2.Template):
    """A template whose every render runs with a fresh step budget."""

    def render(self, *args: Any, **kwargs: Any) -> str:
        token = _STEPS.set(_Steps())
        try:
            return super().render(*args, **kwargs)
        except MemoryError:  # past the worker's memory cap (the daemon renders in bounded workers)
            raise TemplateLimit("chat template needed more memory than it may use") from None
        finally:
            _STEPS.reset(token)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox plus the bounds of this module's docstring."""

    intercepted_binops = frozenset(("*", "**", "+", "%"))
    code_generator_class = _NoFoldCodeGenerator
    template_class = BoundedTemplate

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["optimized"] = False  # the optimizer folds constant expressions at compile time
        super().__init__(*args, **kwargs)
        for name, check in _FILTER_CHECKS.items():
            if name in self.filters:
                self.filters[name] = _bounded_filter(name, self.filters[name], check)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        """The tree of ``source`` once it is known to fit the source size and nesting bounds."""
        if len(source) > MAX_SOURCE:
            raise TemplateLimit(f"chat template is {len(source):,} characters long (at most {MAX_SOURCE:,})")
        try:
            tree = super()._parse(source, name, filename)
        except RecursionError:  # a shape checked_tokens does not count: still a template problem
            raise TemplateLimit("chat template nests too deeply to parse") from None
        check_tree_depth(tree)
        return tree

    def _tokenize(self, source: str, name: str | None, filename: str | None = None,
                  state: str | None = None) -> TokenStream:
        """Jinja's tokens, checked for nesting as the parser reads them (see :mod:`.template_nesting`)."""
        stream = super()._tokenize(source, name, filename, state)
        return TokenStream(checked_tokens(iter(stream)), name, filename)

    def call_binop(self, context: Context, operator_: str, left: Any, right: Any) -> Any:
        _check_binop(operator_, left, right)
        return _check_len(super().call_binop(context, operator_, left, right))

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        _charge()
        owner = getattr(obj, "__self__", None)
        name = getattr(obj, "__name__", "")
        if isinstance(owner, str) and _estimate_str_call(name, owner, args, kwargs) > MAX_ITEMS:
            raise _too_big(f"the length of {name}()'s result", _estimate_str_call(name, owner, args, kwargs))
        return _check_len(super().call(context, obj, *args, **kwargs))

    def counted(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """``iterable``, charging one step per item (wrapped around every ``for`` by the compiler)."""
        for item in iterable:
            _charge()
            yield item

    def checked(self, value: Any) -> Any:
        """``value`` when it is not too long (the result of a ``~`` concatenation)."""
        return _check_len(value)


def _bounded_filter(name: str, filter_: Callable[..., Any],
                    check: Callable[[tuple[Any, ...], dict[str, Any]], int]) -> Any:
    @functools.wraps(filter_)  # keeps Jinja's pass_* marker (it lives in the function's __dict__)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        size = check(args, kwargs)
        if size > MAX_ITEMS:
            raise _too_big(f"the length of the {name} filter's result", size)
        return _check_len(filter_(*args, **kwargs))

    return bounded


def _value_and_args(args: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """Skip the environment / eval context some filters take first."""
    rest = tuple(a for a in args if not isinstance(a, (jinja2.Environment, jinja2.nodes.EvalContext)))
    return (rest[0] if rest else None), rest[1:]


def _width_check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    value, rest = _value_and_args(args)
    width = rest[0] if rest else kwargs.get("width", 0)
    text = str(value) if value is not None else ""
    if not isinstance(width, int):
        return 0
    return len(text) + (text.count("\n") + 1) * width  # indent pads every line; center pads once


def _format_check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    value, _ = _value_and_args(args)
    if isinstance(value, str):
        _check_format(value)
    return 0


def _count_check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    _, rest = _value_and_args(args)
    count = rest[0] if rest else kwargs.get("linecount", kwargs.get("slices", 0))
    return count if isinstance(count, int) else 0


_FILTER_CHECKS: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], int]] = {
    "center": _width_check, "indent": _width_check, "format": _format_check,
    "batch": _count_check, "slice": _count_check,
}

