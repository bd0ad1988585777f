"""ignore_eos and min_tokens on the tiny GGUF: end-of-generation tokens masked, other limits intact.

The tiny model's random weights sample an end-of-generation token (</s> or <|im_end|>) now and
then at temperature 1; the tests look for seeds that do, so they do not depend on one seed's luck.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from engine_helpers import Result, collect

from localrun.engine.engine import Engine
from localrun.engine.sampling import eog_tokens
from localrun.engine.types import DoneReason, GenerateRequest, SamplingOptions

MAX = 48
PROMPT = "hello world"
BASE = SamplingOptions(temperature=1.0, top_k=0, top_p=1.0, repeat_penalty=1.0, num_predict=MAX)


def run(engine: Engine, options: SamplingOptions, fmt: object = None) -> Result:
    return collect(engine.submit(GenerateRequest(PROMPT, options, format=fmt)))  # type: ignore[arg-type]


def early_stops(engine: Engine, want: int = 2) -> list[tuple[int, Result]]:
    """Seeds whose output ends with an end-of-generation token before MAX tokens."""
    found = []
    for seed in range(200):
        result = run(engine, replace(BASE, seed=seed))
        if result.done.done_reason is DoneReason.STOP and result.done.eval_count < MAX - 4:
            found.append((seed, result))
            if len(found) == want:
                return found
    pytest.fail("no seed of 200 made the tiny model end early: cannot test ignore_eos")


def test_the_tiny_model_has_end_of_generation_tokens(tiny_engine: Engine) -> None:
    eog = set(eog_tokens(tiny_engine.vocab).tolist())
    assert {tiny_engine.vocab.eos} <= eog and all(tiny_engine.vocab.is_eog(t) for t in eog)
    assert eog_tokens(tiny_engine.vocab) is eog_tokens(tiny_engine.vocab)  # computed once


def test_ignore_eos_generates_exactly_num_predict_where_the_model_would_stop(tiny_engine: Engine) -> None:
    eog = set(eog_tokens(tiny_engine.vocab).tolist())
    for seed, _ in early_stops(tiny_engine):
        pinned = run(tiny_engine, replace(BASE, seed=seed, ignore_eos=True))
        assert pinned.done.done_reason is DoneReason.LENGTH
        assert pinned.done.eval_count == MAX == len(pinned.generated)
        assert not eog & set(pinned.generated), "an end-of-generation token was sampled"


def test_min_tokens_ignores_end_of_generation_only_until_reached(tiny_engine: Engine) -> None:
    eog = set(eog_tokens(tiny_engine.vocab).tolist())
    for seed, stopped in early_stops(tiny_engine):
        minimum = stopped.done.eval_count + 3
        result = run(tiny_engine, replace(BASE, seed=seed, min_tokens=minimum))
        assert result.done.eval_count >= minimum
        assert not eog & set(result.generated[:minimum])
    # min_tokens 0 changes nothing.
    seed, stopped = early_stops(tiny_engine, want=1)[0]
    assert run(tiny_engine, replace(BASE, seed=seed, min_tokens=0)).generated == stopped.generated


def test_stop_strings_and_the_context_still_end_an_ignore_eos_output(tiny_engine: Engine) -> None:
    greedy = SamplingOptions(temperature=0, repeat_penalty=1.0, num_predict=MAX, ignore_eos=True)
    reference = run(tiny_engine, greedy)
    text = reference.text
    stop = text[len(text) // 2: len(text) // 2 + 3]
    assert stop.strip(), f"no usable stop string in {text!r}"
    stopped = run(tiny_engine, replace(greedy, stop=(stop,)))
    assert stopped.done.done_reason is DoneReason.STOP and stopped.text == text[: text.find(stop)]
    # No num_predict: the context (256 tokens per slot here) ends it.
    endless = run(tiny_engine, replace(greedy, num_predict=None))
    assert endless.done.done_reason is DoneReason.LENGTH
    assert len(endless.done.context) == tiny_engine.num_ctx


def test_constrained_output_still_ends_when_its_grammar_is_complete(tiny_engine: Engine) -> None:
    result = run(tiny_engine, replace(BASE, seed=1, num_predict=300, ignore_eos=True, min_tokens=2), fmt="json")
    assert result.done.done_reason is DoneReason.STOP
    json.loads(result.text)
