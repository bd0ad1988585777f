"""Ollama ``options`` dicts -> typed LoadOptions and SamplingOptions (pure functions).

Precedence: engine defaults < the model's Modelfile PARAMETERs < the request's options.
A wrong type or a value out of range (:mod:`localrun.engine.limits`, the one table of every
option) is an OptionError (HTTP 400) naming the option and its range; options Ollama accepts
but localrun does not implement (mirostat, numa, low_vram...) are ignored, as Ollama itself
ignores options it does not know.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import Any, cast

from ..config import parse_duration
from ..engine import limits
from ..engine.types import LoadOptions, SamplingOptions
from ..errors import ConfigError, OptionError
from ..jsontypes import JSONMapping
from ..runtime.resident import DEFAULT, KeepAlive

log = logging.getLogger(__name__)

ACCEPTED = limits.names(limits.Scope.LOAD, limits.Scope.GENERATION, limits.Scope.REQUEST)
"""The keys of an ``options`` object that localrun applies (vLLM's ignore_eos and min_tokens are /v1 fields)."""
_LOAD = limits.names(limits.Scope.LOAD)
_SAMPLING = {f.name for f in dataclasses.fields(SamplingOptions)}
_DEFAULT_LOAD = LoadOptions()
MAX_KEEP_ALIVE = 100 * 365 * 86400.0  # seconds; longer keep-alives mean "forever"
MIN_BATCH = 64  # >= the engine's sequence ids (at most 64): a smaller batch cannot hold one output per sequence
IGNORED = frozenset(limits.IGNORED)


@functools.lru_cache(maxsize=256)
def _warn_once(message: str) -> None:
    """Log a Modelfile problem the first time it is seen: a model's parameters are merged for
    every request, and one line a request would bury the log (and cost each request's first token)."""
    log.warning("%s", message)


def check_option(name: str, value: object) -> object:
    """Validate one option's type and range (:mod:`localrun.engine.limits`, the one table); returns the
    normalised value, or the value itself for an option localrun does not apply.

    Every API's options pass here as the request arrives, so a value the engine would refuse is an
    OptionError (400) naming the option and its range before a runner sees the request.
    """
    if name not in limits.OPTIONS:
        return value
    return limits.check(name, value)


def top_logprobs(body: JSONMapping) -> int:
    """A request's top-level ``top_logprobs`` (0 when unset), as every API that has it reads it."""
    value = body.get("top_logprobs")
    if value is None:
        return 0
    return cast(int, limits.check("top_logprobs", value))  # a whole-number option's value is an int


def merge_options(
    model_params: JSONMapping | None,
    request_options: object,
    *,
    n_ctx_train: int | None = None,
    base: LoadOptions = _DEFAULT_LOAD,
) -> tuple[LoadOptions, SamplingOptions, dict[str, int | None]]:
    """Combine Modelfile parameters and request options over ``base`` (the daemon's settings:
    batch_invariant, kv_cache_type).

    Returns (load options, sampling options, extras): extras holds ``num_keep``, ``cache_reuse``
    (GenerateRequest's; None when unset) and ``num_ctx``, the explicit per-request maximum (None
    when neither the Modelfile nor the request set it; the service then plans it from memory,
    ``hardware.memory.plan_context``). A request's ``num_ctx``
    above the model's trained context ``n_ctx_train`` is an OptionError naming both; a Modelfile's
    is capped there, with a warning.
    """
    if request_options is None:
        request_options = {}
    if not isinstance(request_options, Mapping):
        raise OptionError(f"'options' must be an object, got {type(request_options).__name__}")
    # Checked option values (a tuple for ``stop``: not JSON), spread below as the dataclasses' keyword
    # arguments, whose types differ per field: no more precise type than Any fits them.
    merged: dict[str, Any] = {}
    for source, strict in ((model_params or {}), False), (request_options, True):
        for name, value in source.items():
            if name in IGNORED or value is None:
                continue
            if name not in ACCEPTED:
                log.debug("ignoring unknown option %r", name)
                continue
            try:
                value = check_option(name, value)
            except OptionError:
                if strict:
                    raise
                _warn_once(f"ignoring bad Modelfile parameter {name}={value!r}")
                continue
            if name == "num_ctx" and n_ctx_train and isinstance(value, int) and value > n_ctx_train:
                if strict:
                    raise OptionError(f"option 'num_ctx' is {value}, above the model's trained context of "
                                      f"{n_ctx_train} tokens")
                _warn_once(f"Modelfile num_ctx {value} is above the model's trained context; using {n_ctx_train}")
                value = n_ctx_train
            merged[name] = value
    load_kwargs = {k: v for k, v in merged.items() if k in _LOAD}
    if load_kwargs.get("num_gpu") == -1:
        load_kwargs["num_gpu"] = None  # Ollama's "-1": let the fit check decide
    if load_kwargs.get("num_thread") == 0:
        load_kwargs["num_thread"] = None  # Ollama's 0 (its default): chosen by the engine (engine/threads.py)
    # A batch smaller than the engine's sequence count aborts the runner in llama.cpp (GGML_ASSERT
    # n_outputs_max, e.g. num_batch 8 with 8 parallel sequences); the service caps it at the pool.
    load_kwargs["num_batch"] = max(load_kwargs.get("num_batch", _DEFAULT_LOAD.num_batch), MIN_BATCH)
    load = dataclasses.replace(base, **load_kwargs)
    sampling_kwargs = {k: v for k, v in merged.items() if k in _SAMPLING}
    sampling_kwargs["num_predict"] = limits.token_limit(sampling_kwargs.get("num_predict"))
    if sampling_kwargs.get("seed") is not None and sampling_kwargs["seed"] < 0:
        sampling_kwargs["seed"] = None
    sampling = SamplingOptions(**sampling_kwargs)
    extras: dict[str, int | None] = {"num_keep": merged.get("num_keep"), "num_ctx": merged.get("num_ctx"),
                                     "cache_reuse": merged.get("cache_reuse")}
    return load, sampling, extras


def parse_keep_alive(value: object) -> KeepAlive:
    """A request's ``keep_alive``: seconds, None = forever; raises OptionError on garbage.

    Returns ``DEFAULT`` (the server's keep-alive) when the request did not set it.
    """
    if value is None:
        return DEFAULT
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise OptionError(f"'keep_alive' must be a duration like '5m' or a number of seconds, got {value!r}")
    try:
        seconds = parse_duration(value, "keep_alive")
    except ConfigError as exc:
        raise OptionError(str(exc)) from None
    if seconds is not None and seconds != seconds:  # "nan" parses as a float; it unloaded at once
        raise OptionError(f"'keep_alive' must be a duration like '5m' or a number of seconds, got {value!r}")
    if seconds is not None and seconds > MAX_KEEP_ALIVE:
        return None  # inf, 1e308, 99999999999h: beyond any uptime, i.e. forever (timers cannot hold them)
    return seconds

