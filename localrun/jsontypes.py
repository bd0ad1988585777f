"""JSON as values: what ``json.loads`` returns and ``json.dumps`` takes.

``JSONValue`` is any JSON document; ``JSONObject`` one object (a request or reply body, a tool call's
arguments, a saved file). A reader narrows a value with ``isinstance`` before it uses it, so a body
of the wrong shape is a checked error, never an ``AttributeError`` deep inside.
"""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
JSONObject: TypeAlias = dict[str, JSONValue]
