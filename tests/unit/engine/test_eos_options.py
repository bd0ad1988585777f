"""ignore_eos / min_tokens: validation, the wire, and which APIs accept them (no model needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from localrun.engine.sampling import Sampler, assert_valid
from localrun.engine.types import GenerateRequest, SamplingOptions
from localrun.errors import InvalidRequest
from localrun.runtime import protocol
from localrun.server.openai import convert as oc
from localrun.server.options import merge_options


def test_defaults_keep_end_of_generation_and_old_constructors_work() -> None:
    options = SamplingOptions(0.5, 10)
    assert options.ignore_eos is False and options.min_tokens == 0
    assert_valid(SamplingOptions(ignore_eos=True, min_tokens=0))
    assert_valid(SamplingOptions(min_tokens=10**6))


@pytest.mark.parametrize("bad", [{"ignore_eos": "yes"}, {"ignore_eos": 1}, {"min_tokens": -1},
                                 {"min_tokens": 1.5}, {"min_tokens": True}, {"min_tokens": None}])
def test_impossible_values_fail_the_engines_assertion(bad: dict[str, object]) -> None:
    """The server refuses these (test_openai_requests_carry_them_and_refuse_bad_values below)."""
    with pytest.raises(AssertionError):
        assert_valid(SamplingOptions(**bad))  # type: ignore[arg-type]


def test_the_mask_applies_for_ignore_eos_or_below_min_tokens_only() -> None:
    def sampler(**kw: object) -> Sampler:
        return Sampler(chain=0, grammar=None, greedy=True, logprobs=False, top_logprobs=0, **kw)  # type: ignore[arg-type]

    eog = np.array([2, 4])
    assert not sampler().suppresses_eog(0)
    assert sampler(eog=eog, ignore_eos=True).suppresses_eog(10**6)
    below = sampler(eog=eog, min_tokens=3)
    assert [below.suppresses_eog(n) for n in range(5)] == [True, True, True, False, False]
    assert not sampler(eog=None, ignore_eos=True).suppresses_eog(0)  # a grammar turns it off


def test_both_fields_cross_the_runner_wire() -> None:
    request = GenerateRequest("hi", SamplingOptions(ignore_eos=True, min_tokens=7, stop=("x",)))
    back = protocol.decode_request(json.loads(json.dumps(protocol.encode_request(request))))
    assert back.sampling == request.sampling


def test_openai_requests_carry_them_and_refuse_bad_values() -> None:
    base = {"model": "m", "prompt": "hi", "max_tokens": 8}
    call = oc.completion_to_native({**base, "ignore_eos": True, "min_tokens": 8})
    assert (call.ignore_eos, call.min_tokens) == (True, 8)
    chat = oc.chat_to_native({"model": "m", "messages": [{"role": "user", "content": "hi"}], "min_tokens": 3})
    assert (chat.ignore_eos, chat.min_tokens) == (False, 3)
    plain = oc.completion_to_native(base)
    assert (plain.ignore_eos, plain.min_tokens) == (False, 0)
    for bad in ({"ignore_eos": "true"}, {"min_tokens": -1}, {"min_tokens": 2.5}, {"min_tokens": 9}):
        with pytest.raises(InvalidRequest):
            oc.completion_to_native({**base, **bad})


def test_ollama_options_do_not_take_them() -> None:
    """Ollama has no such options; like other unknown options they are ignored, not applied."""
    _, sampling, _ = merge_options({}, {"ignore_eos": True, "min_tokens": 5})
    assert (sampling.ignore_eos, sampling.min_tokens) == (False, 0)
