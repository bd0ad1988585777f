"""How deep a chat template may nest, checked before its parser or compiler recurse into it.

Template parsers and compilers recurse once (or a dozen times) per level of nesting: Jinja's
parser spends about fourteen Python frames on each ``(``, its code generator writes one indented
Python block per ``{% if %}`` (Python's compiler refuses past 100 levels of indentation and 20
nested ``for`` loops) and one pair of parentheses per operator of a chain ``1+1+1...`` (its
tokenizer refuses past 200). A template of forty nested parentheses or two hundred nested ``{% if
%}`` blocks would reach Python's recursion limit or its compiler's, and whatever they raise is
not a template error. So nesting is counted first, without recursion:

- :func:`checked_tokens` wraps Jinja's token stream as the parser reads it: blocks inside blocks
  (``{% if %}``, ``{% for %}``, ``{% macro %}``...), and within one tag or ``{{ }}`` brackets inside
  brackets plus runs of unary operators (``not not``, ``- -``) and inline ``if``s, may each nest at
  most ``MAX_NESTING`` deep. A token past the bound stops the parse at that token, when the parser
  is at most ``MAX_NESTING`` levels in;
- :func:`check_tree_depth` walks the parsed tree (iteratively) before it is compiled: chains the
  parser builds in a loop (``a.b.c...``, ``x|f|f...``, ``1+1+1...``) may make it at most
  ``MAX_TREE_DEPTH`` deep.

Go templates (:mod:`.gotemplate`) use the same ``MAX_NESTING`` for blocks and parentheses. Real
templates (Llama, Qwen, Gemma, Mistral, Ollama's library) nest five or six deep. Each refusal is a
:class:`~localrun.errors.TemplateLimit` naming the construct and the line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from jinja2 import nodes
from jinja2.lexer import Token

from ..errors import TemplateLimit

MAX_NESTING = 20      # blocks in blocks (Python compiles at most 20 nested loops); brackets, unary ops, inline ifs
MAX_TREE_DEPTH = 100  # levels of a parsed Jinja template (chains included); Python's compiler allows ~190

_BLOCK_TAGS = frozenset(("if", "for", "macro", "call", "filter", "with", "block", "autoescape", "trans", "set"))
_OPEN = frozenset(("lparen", "lbracket", "lbrace"))
_CLOSE = frozenset(("rparen", "rbracket", "rbrace"))
_LITERALS = frozenset(("integer", "float", "string"))
_KEYWORDS = frozenset(("and", "or", "not", "in", "is", "if", "else"))
_TAG_ENDS = frozenset(("block_end", "variable_end"))


def too_deep(what: str, line: int) -> TemplateLimit:
    """The error for a template with more than MAX_NESTING ``what`` inside one another at ``line``."""
    return TemplateLimit(f"chat template nests too deeply at line {line}: more than {MAX_NESTING} {what}")


@dataclass(slots=True)
class _Nesting:
    """The counts of one pass over a template's tokens (see :func:`checked_tokens`)."""

    blocks: int = 0                # open {% if %}/{% for %}/... blocks
    brackets: int = 0              # open ( [ { in the current tag
    unary: int = 0                 # the current run of unary operators
    inline_ifs: int = 0            # inline ifs so far in the current tag
    tag: str | None = None         # the name of the {% tag %} being read, "" until it is known
    assigns: bool = False          # the tag has an '=' ({% set x = 1 %} opens no block)
    previous: Token | None = None

    def see(self, token: Token) -> None:
        kind = token.type
        if kind == "block_begin":
            self.tag, self.assigns = "", False
        elif kind == "name" and self.tag == "":
            self.tag = token.value
        elif kind in _TAG_ENDS:
            self._close_tag(token)
        else:
            self._expression(token)
        self.previous = token

    def _close_tag(self, token: Token) -> None:
        tag = self.tag
        if tag in _BLOCK_TAGS and not (tag == "set" and self.assigns):
            self.blocks += 1
            if self.blocks > MAX_NESTING:
                raise too_deep(f"blocks inside one another (the last {{% {tag} %}})", token.lineno)
        elif tag is not None and tag.startswith("end"):
            self.blocks = max(0, self.blocks - 1)
        self.tag, self.brackets, self.unary, self.inline_ifs = None, 0, 0, 0

    def _expression(self, token: Token) -> None:
        kind = token.type
        if kind == "assign":
            self.assigns = True
        if kind in _OPEN:
            self.brackets += 1
        elif kind in _CLOSE:
            self.brackets = max(0, self.brackets - 1)
        if self._is_unary(token):
            self.unary += 1
        elif kind not in _OPEN:
            self.unary = 0
        if kind == "name" and token.value == "if":
            self.inline_ifs += 1
        if self.brackets + self.unary + self.inline_ifs > MAX_NESTING:
            raise too_deep("parentheses, brackets, unary operators or inline ifs inside one another",
                           token.lineno)

    def _is_unary(self, token: Token) -> bool:
        if token.type == "name":
            return bool(token.value == "not")
        if token.type not in ("sub", "add"):
            return False
        before = self.previous  # '-' after an operand is a subtraction: "x - 1", "(a) - b", "2 - 1"
        ends_operand = before is not None and (before.type in _CLOSE or before.type in _LITERALS or (
            before.type == "name" and before.value not in _KEYWORDS))
        return not ends_operand


def checked_tokens(tokens: Iterator[Token]) -> Iterator[Token]:
    """``tokens`` as they are, raising TemplateLimit at the first one that nests too deep."""
    nesting = _Nesting()
    for token in tokens:
        nesting.see(token)
        yield token


def check_tree_depth(tree: nodes.Node) -> None:
    """Raise TemplateLimit when ``tree`` is more than MAX_TREE_DEPTH levels deep (walked without recursion)."""
    pending: list[tuple[nodes.Node, int]] = [(tree, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > MAX_TREE_DEPTH:
            raise TemplateLimit(f"chat template nests too deeply at line {node.lineno}: an expression or block "
                                f"more than {MAX_TREE_DEPTH} levels deep (a long chain of operators, filters or "
                                "attributes?)")
        pending.extend((child, depth + 1) for child in node.iter_child_nodes())
