"""The ranges of the sampling options: one table, read by the server and the engine.

The server checks every API's request against it (:func:`localrun.server.options.check_option`),
so a value out of range is a 400 naming the option before a runner sees it; the engine only
asserts the same table as its invariant (:func:`~localrun.engine.sampling.assert_valid`).
Pure: no llama.cpp, no numpy.
"""

from __future__ import annotations

import math

from ..errors import OptionError

MAX_TOP_LOGPROBS = 20
MAX_STOP = 16
MAX_STOP_CHARS = 1000

NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 100.0),
    "top_p": (0.0, 1.0),
    "min_p": (0.0, 1.0),
    "typical_p": (0.0, 1.0),
    "repeat_penalty": (0.0, 100.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
}
"""Real-valued sampling options: inclusive (low, high)."""

WHOLE_RANGES: dict[str, tuple[int, int | None]] = {
    "top_k": (0, None),
    "repeat_last_n": (-1, None),
    "top_logprobs": (0, MAX_TOP_LOGPROBS),
    "min_tokens": (0, None),
}
"""Whole-number sampling options: inclusive (low, high), None for no upper bound."""


def check_number(name: str, value: object) -> float:
    """``value`` as a float when it is a finite number inside ``NUMBER_RANGES[name]``; else OptionError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise OptionError(f"option {name!r} must be a finite number, got {value!r}")
    low, high = NUMBER_RANGES[name]
    if not low <= value <= high:
        raise OptionError(f"option {name!r} must be between {low:g} and {high:g}, got {value!r}")
    return float(value)


def check_whole(name: str, value: object) -> int:
    """``value`` when it is a whole number inside ``WHOLE_RANGES[name]``; else OptionError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(f"option {name!r} must be a whole number, got {value!r}")
    low, high = WHOLE_RANGES[name]
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise OptionError(f"option {name!r} must be {bound}, got {value}")
    return value


def check_stop(value: object) -> tuple[str, ...]:
    """Stop strings: a string or a list of strings, at most MAX_STOP of at most MAX_STOP_CHARS each.

    Empty strings are dropped (they would stop at once).
    """
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
        raise OptionError(f"option 'stop' must be a string or a list of strings, got {value!r}")
    stops = tuple(s for s in value if s)
    if len(stops) > MAX_STOP:
        raise OptionError(f"option 'stop': at most {MAX_STOP} stop strings are supported, got {len(stops)}")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise OptionError(f"option 'stop': stop strings must be at most {MAX_STOP_CHARS} characters")
    return stops
