"""Model parameters (Ollama's ``PARAMETER`` names): which exist, their types and their rules, in one table.

Read by the Modelfile parser (:mod:`localrun.store.modelfile`, ``PARAMETER num_ctx 4096``) and by
the chat's ``/set parameter`` and ``localrun run --option`` (:mod:`localrun.tui.commands`); each
wraps :func:`parse_value`'s OptionError in its own error (with a line number, or as a chat reply).
The daemon checks the resulting options again as requests (``server/options.py``), with the
sampling ranges of ``engine/limits.py``. Pure: no localrun imports but errors.
"""

from __future__ import annotations

import math

from .errors import OptionError

INT_PARAMS = frozenset({"num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "num_keep", "seed",
                        "num_predict", "top_k", "repeat_last_n"})
FLOAT_PARAMS = frozenset({"top_p", "min_p", "typical_p", "temperature", "repeat_penalty", "presence_penalty",
                          "frequency_penalty"})
BOOL_PARAMS = frozenset({"use_mmap", "batch_invariant"})
LIST_PARAMS = frozenset({"stop"})  # repeatable in a Modelfile, a list in a request
# Accepted for compatibility with Ollama Modelfiles; the engine ignores them.
LEGACY_PARAMS: dict[str, type] = {
    "mirostat": int, "mirostat_tau": float, "mirostat_eta": float, "tfs_z": float, "num_gqa": int,
    "penalize_newline": bool, "use_mlock": bool, "low_vram": bool, "f16_kv": bool, "numa": bool,
    "vocab_only": bool, "logits_all": bool, "rope_frequency_base": float, "rope_frequency_scale": float,
}
ParameterValue = int | float | bool | str | list[str]
"""A parameter's typed value: a number or flag, a Modelfile ``stop`` line (str), or /set's stop list."""

PARAMETERS = sorted(INT_PARAMS | FLOAT_PARAMS | BOOL_PARAMS | LIST_PARAMS)
"""Every parameter localrun applies (legacy ones are accepted and ignored)."""

NON_NEGATIVE = frozenset({"num_ctx", "num_batch", "num_thread", "main_gpu", "num_keep", "top_k",
                          "temperature", "repeat_penalty"})
AT_LEAST_ONE = frozenset({"num_ctx", "num_batch"})
UNIT_INTERVAL = frozenset({"top_p", "min_p", "typical_p"})  # probabilities
_TRUE = {"1", "t", "true", "yes", "on"}
_FALSE = {"0", "f", "false", "no", "off"}


def kind_of(key: str) -> type | None:
    """The type of parameter ``key`` (lower case): int, float, bool, or list for ``stop``; None if unknown."""
    if key in INT_PARAMS:
        return int
    if key in FLOAT_PARAMS:
        return float
    if key in BOOL_PARAMS:
        return bool
    if key in LIST_PARAMS:
        return list
    return LEGACY_PARAMS.get(key)


def parse_value(key: str, raw: str) -> int | float | bool:
    """``raw`` as the int, float or bool parameter ``key`` (lower case, known) takes, within its rule.

    Raises OptionError with the reason only ("expects a whole number, got 'lots'", "must not be
    negative, got '-1'"): callers prefix it with the parameter and where it was written.
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
    if key in NON_NEGATIVE and value < 0:
        raise OptionError(f"must not be negative, got {raw!r}")
    if key in AT_LEAST_ONE and value < 1:
        raise OptionError(f"must be at least 1, got {raw!r}")
    if key in UNIT_INTERVAL and not 0 <= value <= 1:
        raise OptionError(f"must be between 0 and 1, got {raw!r}")
    return value
