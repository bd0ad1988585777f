"""The one table of every option (engine/limits.py), driven row by row: each option's bounds hold
on both sides, every other type is refused with a message naming the option and its range, and
whatever the server lets through passes the engine's own assertions (issue #26 point 3: num_thread 0
and num_ctx 1 reached ``check_load_options`` and came back as 500s)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from localrun import parameters
from localrun.engine import limits
from localrun.engine.engine import check_load_options
from localrun.engine.sampling import assert_valid
from localrun.engine.types import LoadOptions, SamplingOptions
from localrun.errors import OptionError
from localrun.hardware.memory import ModelGeometry, plan_context
from localrun.server.options import ACCEPTED, merge_options

WHOLE = sorted(n for n, lim in limits.OPTIONS.items() if lim.kind is limits.Kind.WHOLE)
NUMBER = sorted(n for n, lim in limits.OPTIONS.items() if lim.kind is limits.Kind.NUMBER)
FLAG = sorted(n for n, lim in limits.OPTIONS.items() if lim.kind is limits.Kind.FLAG)
REQUEST_OPTIONS = sorted(ACCEPTED)
NOT_A_NUMBER: list[Any] = ["5", "x", True, False, [1], {}, math.nan, math.inf, -math.inf]


def _refused(name: str, value: Any) -> str:
    with pytest.raises(OptionError) as caught:
        limits.check(name, value)
    message = str(caught.value)
    assert repr(name) in message and limits.describe(name) in message, message
    return message


# --- which options the table covers -----------------------------------------------------------


def test_every_option_anything_accepts_is_in_the_table() -> None:
    """Request options, SamplingOptions fields, request-settable LoadOptions fields and Modelfile
    PARAMETERs: one table holds them all, so none can skip a range check."""
    sampling = {f.name for f in dataclasses.fields(SamplingOptions)}
    assert sampling <= set(limits.OPTIONS)
    assert set(parameters.PARAMETERS) <= set(limits.OPTIONS)
    assert set(limits.OPTIONS) >= ACCEPTED
    load_fields = {f.name for f in dataclasses.fields(LoadOptions)}
    assert limits.names(limits.Scope.LOAD) <= load_fields
    assert limits.names(limits.Scope.LOAD) == {"num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread",
                                               "use_mmap", "batch_invariant"}
    assert not set(limits.IGNORED) & set(limits.OPTIONS)


def test_vllm_fields_are_not_ollama_options_and_logprobs_are_not_modelfile_parameters() -> None:
    assert {"ignore_eos", "min_tokens"}.isdisjoint(ACCEPTED)
    assert {"logprobs", "top_logprobs", "ignore_eos", "min_tokens"}.isdisjoint(parameters.PARAMETERS)


# --- each row's bounds ------------------------------------------------------------------------


@pytest.mark.parametrize("name", WHOLE)
def test_whole_number_options_hold_their_bounds(name: str) -> None:
    limit = limits.OPTIONS[name]
    for inside in (limit.low, limit.high):
        if inside is not None:
            assert limits.check(name, int(inside)) == inside
            assert limits.check(name, float(inside)) == inside  # 16.0 is 16
    if limit.low is not None:
        _refused(name, int(limit.low) - 1)
        _refused(name, -(2**63) - 1)
    if limit.high is not None:
        _refused(name, int(limit.high) + 1)
        _refused(name, 2**63)
    for bad in [*NOT_A_NUMBER, 2.5, (limit.low if limit.low is not None else 0) + 0.5]:
        _refused(name, bad)


@pytest.mark.parametrize("name", NUMBER)
def test_number_options_hold_their_bounds(name: str) -> None:
    limit = limits.OPTIONS[name]
    assert limit.low is not None and limit.high is not None  # every real-valued option is bounded
    for inside in (limit.low, limit.high, (limit.low + limit.high) / 2, int(limit.low)):
        checked = limits.check(name, inside)
        assert checked == inside and isinstance(checked, float)
    for outside in (limit.low - 0.001, limit.high + 0.001, 2**63, -(2**63), 10**400, -(10**400)):
        _refused(name, outside)
    for bad in NOT_A_NUMBER:
        _refused(name, bad)


@pytest.mark.parametrize("name", FLAG)
def test_flags_are_true_or_false_only(name: str) -> None:
    assert limits.check(name, True) is True and limits.check(name, False) is False
    for bad in (0, 1, "true", "yes", None, [True]):
        _refused(name, bad)


def test_stop_strings() -> None:
    assert limits.check("stop", "END") == ("END",)
    assert limits.check("stop", ["a", "", "b"]) == ("a", "b")  # an empty stop string would stop at once
    assert limits.check("stop", ["x"] * limits.MAX_STOP) == ("x",) * limits.MAX_STOP
    for bad in (["x"] * (limits.MAX_STOP + 1), ["x" * (limits.MAX_STOP_CHARS + 1)], [["nested"]], [1], 5, None,
                {"a": 1}):
        _refused("stop", bad)


@pytest.mark.parametrize(("name", "value", "words"), [
    ("num_ctx", 1, "at least 16"),
    ("num_thread", -1, "between 0 and 512 (0: follow the free cores)"),
    ("num_thread", 513, "between 0 and 512"),
    ("num_gpu", -2, "between -1 and 2147483647 (-1: as many layers as fit)"),
    ("top_k", 2**31, "between 0 and 2147483647"),
    ("top_p", 1.5, "a finite number between 0 and 1"),
    ("presence_penalty", -3, "between -2 and 2"),
    ("top_logprobs", 21, "between 0 and 20"),
])
def test_a_refusal_says_the_range_in_plain_numbers(name: str, value: Any, words: str) -> None:
    assert words in _refused(name, value)


def test_a_huge_value_is_cut_short_in_the_message() -> None:
    assert len(_refused("stop", ["y" * 5000])) < 400


# --- what passes the server passes the engine -------------------------------------------------


def _boundaries(name: str) -> list[Any]:
    limit = limits.OPTIONS[name]
    if limit.kind is limits.Kind.FLAG:
        return [True, False]
    if limit.kind is limits.Kind.STOP:
        return ["x", ["a", ""], ["s" * limits.MAX_STOP_CHARS] * limits.MAX_STOP]
    values: list[Any] = [0, 1, -1, 2, 15, 16, 64, 2**31 - 1, 2**31, 2**63, -(2**63), 0.5, 3.0]
    return [v for v in values if _passes(name, v)]


def _passes(name: str, value: Any) -> bool:
    try:
        limits.check(name, value)
    except OptionError:
        return False
    return True


@pytest.mark.parametrize("name", REQUEST_OPTIONS)
def test_every_accepted_value_passes_the_engines_assertions(name: str) -> None:
    """The bug of issue #26 point 3: a value the server took failed ``check_load_options`` or
    ``assert_valid`` in the runner, a 500 carrying the assertion. Now the two agree on every bound."""
    accepted = _boundaries(name)
    assert accepted, name
    for value in accepted:
        load, sampling, _ = merge_options({}, {name: value})
        check_load_options(load)
        assert_valid(sampling)


@pytest.mark.parametrize(("options", "field", "expected"), [
    ({"num_thread": 0}, "num_thread", None),  # Ollama's default: every physical core
    ({"num_gpu": -1}, "num_gpu", None),       # Ollama's "as many as fit"
    ({"num_ctx": 16}, "num_ctx", 16),
    ({"num_ctx": 4096.0}, "num_ctx", 4096),
    ({"num_batch": 1}, "num_batch", 64),      # raised to the engine's sequence count
])
def test_special_values_become_what_the_engine_takes(options: dict[str, Any], field: str, expected: Any) -> None:
    load, _, _ = merge_options({}, options)
    assert getattr(load, field) == expected


@pytest.mark.parametrize("options", [{"num_thread": 0.5}, {"num_ctx": 1}, {"num_ctx": 15}, {"num_ctx": 3.0},
                                     {"main_gpu": -1}, {"num_keep": -1}, {"top_k": 2**63}, {"num_gpu": 2**40}])
def test_a_request_out_of_range_is_refused_naming_the_option(options: dict[str, Any]) -> None:
    name = next(iter(options))
    with pytest.raises(OptionError, match=f"'{name}' must be"):
        merge_options({}, options)


def test_a_modelfile_value_out_of_range_is_ignored_with_the_default_kept() -> None:
    """A model stored before this range existed still loads: its bad PARAMETER is skipped (logged)."""
    load, _, extras = merge_options({"num_ctx": 8, "num_thread": 9999}, {})
    assert extras["num_ctx"] is None and load.num_thread is None


@pytest.mark.parametrize(("key", "raw", "words"), [
    ("num_ctx", "8", "at least 16"), ("num_thread", "600", "between 0 and 512"), ("num_gpu", "-5", "between -1"),
    ("top_k", "99999999999", "between 0 and 2147483647"), ("temperature", "101", "between 0 and 100"),
])
def test_modelfile_and_set_parameter_use_the_same_ranges(key: str, raw: str, words: str) -> None:
    with pytest.raises(OptionError, match=words):
        parameters.parse_value(key, raw)
    assert parameters.parse_value("num_thread", "0") == 0 and parameters.parse_value("num_ctx", "16") == 16


@pytest.mark.parametrize("n_ctx_train", [1, 8, 15])
@pytest.mark.parametrize("num_ctx", [None, 8])
def test_a_model_trained_on_a_tiny_context_still_loads_the_engines_smallest(n_ctx_train: int,
                                                                             num_ctx: int | None) -> None:
    """A GGUF may claim a context of 8 tokens (anyone may create one): the plan floors at MIN_CTX
    instead of handing the engine a context its assertion refuses (a 500 on every request).
    ``num_ctx`` 8 is LOCALRUN_CONTEXT_LENGTH capped at such a trained context."""
    geometry = ModelGeometry(architecture="llama", file_size=1 << 20, n_layer=2, n_embd=64, n_ff=128, n_head=4,
                             n_head_kv=2, head_dim_k=16, head_dim_v=16, n_vocab=256, n_ctx_train=n_ctx_train)
    plan = plan_context(geometry, LoadOptions(), 1 << 30, [], num_ctx=num_ctx, num_parallel=None)
    load, _, _ = merge_options({}, {})
    check_load_options(dataclasses.replace(load, num_ctx=plan.num_ctx, context_pool=plan.context_pool,
                                           num_parallel=plan.num_parallel,
                                           num_batch=min(load.num_batch, plan.context_pool)))
    assert plan.num_ctx == limits.MIN_CTX
