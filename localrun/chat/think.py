"""A request's ``think``: whether a thinking model reasons before it answers, and how hard.

Ollama's ``think`` is true, false or an effort level ("low", "medium", "high": gpt-oss reads it as
its reasoning effort); OpenAI's ``reasoning_effort`` and the Responses API's ``reasoning.effort``
map onto it (:func:`from_effort`). The model's template gets it (:func:`template_variables`) as
Hugging Face templates read it, ``enable_thinking`` and, for a level, ``reasoning_effort``
(gpt-oss's template), or as Ollama's Go templates do, ``.Think``, ``.ThinkLevel`` and ``.IsThinkSet``.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal

from ..errors import InvalidRequest

ThinkLevel = Literal["low", "medium", "high"]
LEVELS: tuple[ThinkLevel, ...] = ("low", "medium", "high")
Think = bool | ThinkLevel
"""True (think), False (answer at once) or a level (think, with that effort)."""

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
"""OpenAI's reasoning efforts (chat completions' ``reasoning_effort``, Responses' ``reasoning.effort``)."""


def as_level(value: object) -> ThinkLevel | None:
    """``value`` when it is one of :data:`LEVELS`, else None."""
    return next((level for level in LEVELS if value == level), None)


def parse_think(value: object) -> Think | None:
    """A request's ``think`` (Ollama's field): true, false, "low", "medium" or "high"; None when unset."""
    if value is None or isinstance(value, bool):
        return value
    level = as_level(value)
    if level is None:
        raise InvalidRequest("'think' must be true, false, \"low\", \"medium\" or \"high\"")
    return level


def from_effort(effort: object, field: str) -> Think | None:
    """OpenAI's effort as ``think``: "none" and "minimal" answer at once (most thinking models can only
    think or not), "low" / "medium" / "high" are levels, "xhigh" is "high"; None when unset. ``field``
    names the request field in the 400."""
    if effort is None:
        return None
    if effort not in EFFORTS:
        raise InvalidRequest(f"'{field}' must be one of {', '.join(EFFORTS)}")
    if effort in ("none", "minimal"):
        return False
    return "high" if effort == "xhigh" else parse_think(effort)


def template_variables(think: Think | None, *, go: bool) -> dict[str, object]:
    """What a template reads of ``think`` (nothing when unset: the template's own default applies)."""
    if think is None:
        return {}
    level = think if isinstance(think, str) else ""
    if go:
        return {"Think": think is not False, "ThinkLevel": level, "IsThinkSet": True}
    return {"enable_thinking": think is not False, **({"reasoning_effort": level} if level else {})}
