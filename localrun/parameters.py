"""Model parameters (Ollama's ``PARAMETER`` names): which exist, how their text is read, in one place.

Read by the Modelfile parser (:mod:`localrun.store.modelfile`, ``PARAMETER num_ctx 4096``) and by
the chat's ``/set parameter`` and ``localrun run --option`` (:mod:`localrun.tui.commands`); each
wraps :func:`parse_value`'s OptionError in its own error (with a line number, or as a chat reply).
Which parameters exist, their types and ranges are the table of every option,
:mod:`localrun.engine.limits` (pure, like this module), which the daemon checks requests against
too (``server/options.py``): a Modelfile cannot hold a value no request could use.
"""

from __future__ import annotations

import math

from .engine import limits
from .errors import OptionError

_TYPES: dict[limits.Kind, type] = {limits.Kind.WHOLE: int, limits.Kind.NUMBER: float, limits.Kind.FLAG: bool,
                                   limits.Kind.STOP: list}
_APPLIED = limits.names(limits.Scope.LOAD, limits.Scope.GENERATION)  # a Modelfile may set these
LIST_PARAMS = frozenset(n for n in _APPLIED if limits.OPTIONS[n].kind is limits.Kind.STOP)
"""Repeatable in a Modelfile, a list in a request: ``stop``."""
# Accepted for compatibility with Ollama Modelfiles; the engine ignores them.
LEGACY_PARAMS: dict[str, type] = {name: _TYPES[kind] for name, kind in limits.IGNORED.items()}
ParameterValue = int | float | bool | str | list[str]
"""A parameter's typed value: a number or flag, a Modelfile ``stop`` line (str), or /set's stop list."""

PARAMETERS = sorted(_APPLIED)
"""Every parameter localrun applies (legacy ones are accepted and ignored)."""

_TRUE = {"1", "t", "true", "yes", "on"}
_FALSE = {"0", "f", "false", "no", "off"}


def kind_of(key: str) -> type | None:
    """The type of parameter ``key`` (lower case): int, float, bool, or list for ``stop``; None if unknown."""
    if key in _APPLIED:
        return _TYPES[limits.OPTIONS[key].kind]
    return LEGACY_PARAMS.get(key)


def parse_value(key: str, raw: str) -> int | float | bool:
    """``raw`` as the int, float or bool parameter ``key`` (lower case, known) takes, within its rule.

    Raises OptionError with the reason only ("expects a whole number, got 'lots'", "must be a whole
    number of at least 16, got '8'"): callers prefix it with the parameter and where it was written.
    Legacy parameters are only typed: the engine ignores them.
    """
    kind = kind_of(key)
    text = raw.strip()
    if kind is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise OptionError(f"expects true or false, got {raw!r}")
    try:
        value: int | float = int(text) if kind is int else float(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise OptionError(f"expects {what}, got {raw!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise OptionError(f"expects a finite number, got {raw!r}")
    if key in _APPLIED and not limits.within(key, value):
        raise OptionError(f"must be {limits.describe(key)}, got {raw!r}")
    return value
