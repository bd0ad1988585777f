"""How ``localrun`` reads its command line: options before or after positional arguments, as cobra does.

Every command parser is a :class:`CommandParser` (``build_parser`` passes it as the sub-parsers'
``parser_class``, and argparse hands it down to nested groups such as ``localrun service``), so a
command registered in any module gets these rules without doing anything:

- options may come before, between or after positional arguments:
  ``run MODEL --verbose "prompt"`` and ``run --verbose MODEL "prompt"`` mean the same;
- ``--`` ends the options: ``run MODEL -- --not-an-option`` sends that text as the prompt;
- a mistake (unknown option, missing or extra argument) is reported by the command's own parser,
  so the user sees ``usage: localrun run ...`` rather than the top-level usage.

Parsers that cannot be read intermixed (those with a sub-command group or a ``REMAINDER``
positional) keep argparse's ordinary order; their leaves still parse intermixed.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

_UNORDERED = (argparse.PARSER, argparse.REMAINDER)


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose options may appear anywhere among its positional arguments.

    Contract: ``parse_known_args`` of a command parser never returns leftovers; an argument it
    does not know is an error reported with this parser's usage (exit code 2), because a leftover
    handed back to the top-level parser would be reported with the top-level usage.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._intermixing = False

    def _ordered(self) -> bool:
        """True when this parser must read its arguments in order (sub-commands, REMAINDER)."""
        return any(action.nargs in _UNORDERED for action in self._get_positional_actions())

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing or self._ordered():
            # Inside parse_known_intermixed_args (which calls this twice), or a group of sub-commands.
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            parsed, extras = super().parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._dash_hint(extras)}")
        return parsed, extras

    def _dash_hint(self, extras: list[str]) -> str:
        """A hint for text that looks like an option, where free text (a prompt) is accepted."""
        takes_text = any(action.nargs in ("*", "+") for action in self._get_positional_actions())
        if takes_text and any(e.startswith("-") for e in extras):
            return " (to pass text that starts with '-', put it after --)"
        return ""
