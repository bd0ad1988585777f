"""JSON as values: what ``json.loads`` returns and ``json.dumps`` takes.

``JSONValue`` is any JSON document; ``JSONObject`` one object (a request or reply body, a tool call's
arguments, a saved file); ``JSONMapping`` an object a function only reads (any ``JSONObject`` or
``dict[str, object]`` fits, since a Mapping cannot be written through). A reader narrows a value
before it uses it (``isinstance``, or the ``as_*`` readers below, which read a missing or
wrong-typed field as absent), never with ``Any``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
JSONObject: TypeAlias = dict[str, JSONValue]
JSONMapping: TypeAlias = Mapping[str, object]


def as_object(value: JSONValue) -> JSONObject:
    """``value`` when it is an object, else an empty one (a field the document does not have)."""
    return value if isinstance(value, dict) else {}


def as_objects(value: JSONValue) -> list[JSONObject]:
    """The objects of a list (none when ``value`` is not a list)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def as_number(value: JSONValue) -> float | None:
    """A JSON number, or None for anything else (``true`` is not a number here)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
