"""JSON as values: what ``json.loads`` returns and ``json.dumps`` takes.

``JSONValue`` is any JSON document; ``JSONObject`` one object (a request or reply body, a tool call's
arguments, a saved file); ``JSONMapping`` an object a function only reads (any ``JSONObject`` or
``dict[str, object]`` fits, since a Mapping cannot be written through). A reader narrows a value
before it uses it (``isinstance``, or the ``as_*`` readers below, which read a missing or
wrong-typed field as absent), never with ``Any``. ``loads`` reads every JSON text that comes from
outside (a request body, a tool call's arguments, a model's output).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TypeAlias

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
JSONObject: TypeAlias = dict[str, JSONValue]
JSONMapping: TypeAlias = Mapping[str, object]


NESTING_LIMIT = 128
"""The deepest JSON read from outside may nest (serde_json's default limit). Replies echo parts of
a request a few levels deeper (a response's ``metadata``, its ``tools``) and the one reply writer
must always be able to write them: orjson stops at 255 levels, Python's json at its recursion
limit, which a 970-deep body reached (a 500 on a streamed Response), and a 2,000-deep tool call's
arguments string broke the parser itself. Real documents nest under 20."""


class TooDeep(ValueError):
    """A JSON text nests deeper than ``NESTING_LIMIT``."""

    def __init__(self) -> None:
        super().__init__(f"it nests deeper than {NESTING_LIMIT} levels of arrays and objects")


def loads(text: str | bytes) -> JSONValue:
    """``text`` as a JSON value. ValueError for anything that is not JSON (``NaN`` and ``Infinity``,
    which Python's json reads, included) and ``TooDeep`` past ``NESTING_LIMIT``, so a caller
    catches one class for every text it cannot use."""
    try:
        value: JSONValue = json.loads(text, parse_constant=_not_json)
    except RecursionError:  # ~970 levels: the parser's own stack
        raise TooDeep() from None
    if _nests_deeper(value, NESTING_LIMIT):
        raise TooDeep()
    return value


def _not_json(name: str) -> float:
    """``NaN`` and ``Infinity``, which Python's json reads and JSON does not have: refused (no option
    may be non-finite, and nothing after the door need expect one)."""
    raise ValueError(f"{name} is not a JSON number")


def _nests_deeper(value: object, levels: int) -> bool:
    """Does ``value`` hold arrays and objects more than ``levels`` deep? Recurses into containers
    only, and stops at the bound: 0.09 ms on Claude Code's 82 KB first request."""
    if type(value) is not dict and type(value) is not list:
        return False
    if levels == 0:
        return True
    for item in value.values() if type(value) is dict else value:  # a loop: any() over a generator took 2.5x
        if (type(item) is dict or type(item) is list) and _nests_deeper(item, levels - 1):
            return True
    return False


def as_object(value: JSONValue) -> JSONObject:
    """``value`` when it is an object, else an empty one (a field the document does not have)."""
    return value if isinstance(value, dict) else {}


def as_objects(value: JSONValue) -> list[JSONObject]:
    """The objects of a list (none when ``value`` is not a list)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def as_number(value: JSONValue) -> float | None:
    """A JSON number, or None for anything else (``true`` is not a number here)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
