"""Every option localrun takes (Ollama's ``options``, Modelfile PARAMETERs, vLLM's extra fields):
its type, its inclusive range and where it may be set. One table, read by every layer.

- The server checks each API's request against it as the request arrives
  (:func:`localrun.server.options.check_option` calls :func:`check`): a wrong type or a value out
  of range is an OptionError (HTTP 400) naming the option and its range, before a runner sees it.
- The Modelfile parser and the TUI's ``/set parameter`` apply the same ranges to their text
  (:func:`localrun.parameters.parse_value`), so a model cannot be created with a value no request
  could use.
- The engine only asserts :func:`within` as its invariant (:func:`~localrun.engine.sampling.assert_valid`,
  :func:`~localrun.engine.engine.check_load_options`): a value out of range there is a caller's bug.

Ranges bound what the engine and llama.cpp can take, not what fits: a ``num_ctx`` above the
model's trained context or above what memory holds is refused later, with its own message
(``server.options.merge_options``, ``hardware.memory.plan_context``). Pure: no llama.cpp, no numpy.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from ..errors import InvalidRequest, OptionError

MAX_TOP_LOGPROBS = 20
MAX_STOP = 16
MAX_STOP_CHARS = 1000
MIN_CTX = 16  # the smallest context the engine loads: llama.cpp's embeddings need 16 cells (engine/embedding.py)
MAX_THREADS = 512  # ggml's GGML_MAX_N_THREADS: more aborts the runner process
# Sequence slots per model: each slot takes up to three of llama.cpp's LLAMA_MAX_SEQ (256) sequence ids
# (itself, and cached prefixes, those at most MAX_CACHE_IDS: engine.py), and llama-server's largest common -np is 64
MAX_PARALLEL = 64
# Retrieval requests (embeddings, reranking): OpenAI's 2,048 inputs a request, and a bound on their
# text so a 10 MB body is refused before it is tokenized (8M characters is ~2M tokens)
MAX_TEXTS = 2048
MAX_POOLED_CTX = 8192  # the most tokens one input (or query-document pair) of a pooled context holds
MAX_TEXT_CHARS = 8_000_000
INT32_MAX = 2**31 - 1  # options llama.cpp takes as int32_t: ctypes would wrap a larger value silently
# llama-server's ``samplers`` (its common/sampling.cpp names) that localrun's chain runs, in any order
SAMPLERS = ("penalties", "top_k", "typ_p", "top_p", "min_p", "temperature", "infill")
# ... and their other spellings there; "dry", "xtc" and "top_n_sigma" do nothing at their default settings
# (localrun takes no others), so a list naming them runs without them
_SAMPLER_ALIASES = {"top-k": "top_k", "topk": "top_k", "typ-p": "typ_p", "typp": "typ_p", "typ": "typ_p",
                    "typical_p": "typ_p", "top-p": "top_p", "topp": "top_p", "nucleus": "top_p", "min-p": "min_p",
                    "minp": "min_p", "temp": "temperature"}
_NO_OP_SAMPLERS = frozenset({"dry", "xtc", "top_n_sigma", "top-n-sigma", "topnsigma"})


class Kind(enum.Enum):
    """An option's JSON type; the value is how an error message names it."""

    WHOLE = "a whole number"
    NUMBER = "a finite number"
    FLAG = "true or false"
    STOP = "a string or a list of strings"
    SAMPLERS = "a list of sampler names"


class Scope(enum.Enum):
    """Where an option may be set, and so what it changes."""

    LOAD = "load"              # request options and Modelfile; fixed at load (LoadOptions): a change reloads
    GENERATION = "generation"  # request options and Modelfile; per request (SamplingOptions, num_keep)
    REQUEST = "request"        # request options only (logprobs): a Modelfile has no such PARAMETER
    FIELD = "field"            # a top-level /v1 field only (vLLM's): no Ollama option, no PARAMETER


@dataclass(frozen=True, slots=True)
class Limit:
    """One option: its kind, inclusive bounds (None: unbounded on that side) and scope.

    ``meaning`` says what special values mean, for error messages and docs.
    """

    kind: Kind
    scope: Scope
    low: float | None = None
    high: float | None = None
    meaning: str = ""


_W, _N, _F = Kind.WHOLE, Kind.NUMBER, Kind.FLAG
_LOAD, _GEN, _REQ, _FIELD = Scope.LOAD, Scope.GENERATION, Scope.REQUEST, Scope.FIELD

OPTIONS: dict[str, Limit] = {
    # load time: LoadOptions. num_ctx above the trained context or memory is refused when planned;
    # num_batch is raised to the engine's sequence count and capped at the context (server/options.py)
    "num_ctx": Limit(_W, _LOAD, MIN_CTX),
    "num_batch": Limit(_W, _LOAD, 1),
    "num_gpu": Limit(_W, _LOAD, -1, INT32_MAX, "-1: as many layers as fit"),
    "main_gpu": Limit(_W, _LOAD, 0, INT32_MAX),
    "num_thread": Limit(_W, _LOAD, 0, MAX_THREADS, "0: follow the free cores"),
    "use_mmap": Limit(_F, _LOAD),
    "batch_invariant": Limit(_F, _LOAD),
    # per request: SamplingOptions (num_keep: the request's truncation)
    "num_keep": Limit(_W, _GEN, 0, None),
    "seed": Limit(_W, _GEN, None, None, "negative: random"),
    "num_predict": Limit(_W, _GEN, None, None, "negative: until the end of generation or of the context"),
    "top_k": Limit(_W, _GEN, 0, INT32_MAX, "0: off"),
    "repeat_last_n": Limit(_W, _GEN, -1, INT32_MAX, "-1: the whole context, 0: off"),
    "temperature": Limit(_N, _GEN, 0.0, 100.0, "0: greedy"),
    "top_p": Limit(_N, _GEN, 0.0, 1.0),
    "min_p": Limit(_N, _GEN, 0.0, 1.0),
    "typical_p": Limit(_N, _GEN, 0.0, 1.0),
    "repeat_penalty": Limit(_N, _GEN, 0.0, 100.0),
    "presence_penalty": Limit(_N, _GEN, -2.0, 2.0),
    "frequency_penalty": Limit(_N, _GEN, -2.0, 2.0),
    "stop": Limit(Kind.STOP, _GEN),
    "cache_reuse": Limit(_W, _GEN, 0, INT32_MAX, "0: exact prefixes only"),
    "logprobs": Limit(_F, _REQ),
    "top_logprobs": Limit(_W, _REQ, 0, MAX_TOP_LOGPROBS),
    "ignore_eos": Limit(_F, _FIELD),
    "min_tokens": Limit(_W, _FIELD, 0, None),
    "samplers": Limit(Kind.SAMPLERS, _FIELD, meaning=", ".join(SAMPLERS)),
}
"""Every option localrun applies: name -> :class:`Limit`."""

IGNORED: dict[str, Kind] = {
    "mirostat": _W, "mirostat_tau": _N, "mirostat_eta": _N, "tfs_z": _N, "num_gqa": _W, "penalize_newline": _F,
    "use_mlock": _F, "low_vram": _F, "f16_kv": _F, "numa": _F, "vocab_only": _F, "logits_all": _F,
    "embedding_only": _F, "rope_frequency_base": _N, "rope_frequency_scale": _N,
}
"""Options Ollama has and localrun does not implement: accepted (typed in a Modelfile) and ignored."""


def names(*scopes: Scope) -> frozenset[str]:
    """The options of ``scopes``."""
    return frozenset(name for name, limit in OPTIONS.items() if limit.scope in scopes)


def describe(name: str) -> str:
    """What option ``name`` takes, as an error message says it: "a whole number between 0 and 20"."""
    limit = OPTIONS[name]
    low, high = limit.low, limit.high
    if limit.kind is Kind.STOP:
        return f"{limit.kind.value} (at most {MAX_STOP}, of at most {MAX_STOP_CHARS} characters each)"
    if low is not None and high is not None:
        text = f"{limit.kind.value} between {_bound(low)} and {_bound(high)}"
    elif low is not None:
        text = f"{limit.kind.value} of at least {_bound(low)}"
    elif high is not None:
        text = f"{limit.kind.value} of at most {_bound(high)}"
    else:
        text = limit.kind.value
    return f"{text} ({limit.meaning})" if limit.meaning else text


def within(name: str, value: object) -> bool:
    """Whether ``value`` is already a valid, normalised value of option ``name``.

    Exact: a whole number is an ``int`` (not a bool, not ``3.0``); ``stop`` is a tuple of
    non-empty strings. What :func:`check` returns always passes; the engine asserts this.
    """
    limit = OPTIONS[name]
    if limit.kind is Kind.FLAG:
        return isinstance(value, bool)
    if limit.kind is Kind.STOP:
        return (isinstance(value, tuple) and len(value) <= MAX_STOP
                and all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in value))
    if limit.kind is Kind.SAMPLERS:
        return isinstance(value, tuple) and len(value) <= 2 * len(SAMPLERS) and all(s in SAMPLERS for s in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if limit.kind is Kind.WHOLE and not isinstance(value, int):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return (limit.low is None or value >= limit.low) and (limit.high is None or value <= limit.high)


def check(name: str, value: object) -> int | float | bool | tuple[str, ...]:
    """``value`` normalised for option ``name`` (a known one); OptionError naming the option and its range.

    Normalising: a whole-valued float (``3.0``) is an int, an int is a float for a number option,
    a string is a one-string ``stop`` and empty stop strings are dropped (they would stop at once);
    sampler names take llama-server's spellings (any case, ``top-k``, ``nucleus``...) and those that
    do nothing here are left out.
    """
    kind = OPTIONS[name].kind
    normal: object = value
    if kind is Kind.WHOLE and isinstance(value, float) and value.is_integer():
        normal = int(value)
    elif kind is Kind.NUMBER and isinstance(value, int) and not isinstance(value, bool):
        normal = float(value) if abs(value) < 2**1023 else math.inf  # float(10**400) raises OverflowError
    elif kind is Kind.STOP:
        strings = [value] if isinstance(value, str) else value
        if isinstance(strings, (list, tuple)):
            normal = tuple(s for s in strings if s != "")
    elif kind is Kind.SAMPLERS and isinstance(value, (list, tuple)) and all(isinstance(s, str) for s in value):
        spelled = (s.lower() for s in value)
        normal = tuple(_SAMPLER_ALIASES.get(s, s) for s in spelled if s not in _NO_OP_SAMPLERS)
    if not within(name, normal):
        raise OptionError(f"option {name!r} must be {describe(name)}, got {_shown(value)}")
    return cast("int | float | bool | tuple[str, ...]", normal)  # what within() accepts


def check_texts(texts: Sequence[object], what: str) -> None:
    """InvalidRequest unless ``texts`` (a retrieval request's inputs or documents) are at most
    MAX_TEXTS items of at most MAX_TEXT_CHARS characters together; checked before any is tokenized."""
    if len(texts) > MAX_TEXTS:
        raise InvalidRequest(f"at most {MAX_TEXTS} {what} a request, got {len(texts)}")
    chars = sum(len(t) for t in texts if isinstance(t, str))
    if chars > MAX_TEXT_CHARS:
        raise InvalidRequest(f"the {what} hold {chars:,} characters; at most {MAX_TEXT_CHARS:,} a request "
                             "(send them in several requests)")


def token_limit(num_predict: int | None) -> int | None:
    """The most tokens a generation may produce: None (no limit) for None or a negative
    ``num_predict`` (Ollama's -1, "until the end", and -2, "fill the context")."""
    return num_predict if num_predict is not None and num_predict >= 0 else None


def penalty_window(repeat_last_n: int, num_ctx: int) -> int:
    """How many recent tokens the repetition penalties look at: -1 is the whole context."""
    return num_ctx if repeat_last_n == -1 else repeat_last_n


def _bound(value: float) -> str:
    """A bound as people write it: 0, 1, 2147483647, 0.5 (not 0.0 or 2.14748e+09)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _shown(value: object) -> str:
    """``value`` for an error message, cut short (a stop list may be 100 kB)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
