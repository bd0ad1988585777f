"""Speculative decoding (engine/drafter.py) on the tiny GGUF: the same greedy tokens as without it.

The tiny model's random weights never repeat themselves, so the n-gram drafter would find nothing
to draft. To run every path of the batcher's verification, these tests draft with an oracle that
knows the greedy continuation (from a run without drafts) and spoils some of its guesses: a
draft confirmed whole, one cut short by a contradicting row, one rejected at its first token,
beside other sequences, ended by a stop string, num_predict or the context, with logprobs.
The real n-gram drafter on a real model is tested at the end (Gemma 3 270M, marked slow).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from engine_helpers import Result, collect, same_until_a_near_tie

from localrun.engine import batcher
from localrun.engine.engine import Engine
from localrun.engine.stepcost import CostModel, StepCost
from localrun.engine.types import DoneReason, GenerateRequest, LoadOptions, SamplingOptions


class OracleDrafter:
    """Drafts the known greedy continuation; every second guess is spoilt at its first or second token."""

    references: ClassVar[list[list[int]]] = []  # full contexts (prompt + greedy output) of runs without drafts
    calls: ClassVar[int] = 0

    def propose(self, tokens: list[int], k: int) -> list[int]:
        for ref in self.references:
            if len(ref) > len(tokens) and ref[: len(tokens)] == tokens:
                draft = ref[len(tokens): len(tokens) + k]
                OracleDrafter.calls += 1
                spoil = (0, None, 1, None)[OracleDrafter.calls % 4]
                if draft and spoil is not None and spoil < len(draft):
                    draft[spoil] = (draft[spoil] + 1) % 300 + 300  # a real token, just not this one
                return draft
        return []


@pytest.fixture
def oracle(monkeypatch: pytest.MonkeyPatch) -> type[OracleDrafter]:
    """The oracle drafts, and every offered draft is decoded (no cost model: how much drafting pays
    on this machine is test_the_measured_cost_decides's business)."""
    monkeypatch.setattr(batcher, "NgramDrafter", OracleDrafter)
    monkeypatch.setattr(StepCost, "model", lambda self: None)
    OracleDrafter.references = []
    return OracleDrafter


OPTIONS = LoadOptions(num_ctx=512, num_parallel=4, num_batch=64)


def prompt(n: int, offset: int) -> list[int]:
    return [1] + [300 + (offset + 7 * i) % 400 for i in range(n)]


def run_all(engine: Engine, requests: list[GenerateRequest]) -> list[Result]:
    handles = [engine.submit(r) for r in requests]  # submitted together: they decode side by side
    return [collect(h) for h in handles]


@pytest.fixture
def engines(tiny_gguf: Path) -> Iterator[tuple[Engine, Engine]]:
    """A fresh pair per test (the tiny model loads in milliseconds): the same requests in the same
    order then find the same cache in both, so only the drafts differ."""
    plain = Engine(str(tiny_gguf), dataclasses.replace(OPTIONS, speculative=False))
    spec = Engine(str(tiny_gguf), OPTIONS)
    yield plain, spec
    plain.close()
    spec.close()


def reference(plain: Engine, oracle: type[OracleDrafter], requests: list[GenerateRequest]) -> list[Result]:
    """The runs without drafts, whose contexts the oracle then drafts from."""
    results = run_all(plain, requests)
    oracle.references += [list(r.done.context) for r in results]
    return results


def no_stray_cells(engine: Engine) -> None:
    kv = engine.batcher.kv  # type: ignore[union-attr]
    kv.check_integrity()
    assert engine.stats().kv_cells_used == kv.cached_cells  # no rejected draft left a cell behind


@pytest.mark.parametrize("sampling", [
    SamplingOptions(temperature=0, num_predict=96),
    SamplingOptions(temperature=0, num_predict=80, repeat_penalty=1.3, repeat_last_n=8),
    SamplingOptions(temperature=0, num_predict=64, frequency_penalty=0.5, presence_penalty=0.2),
    SamplingOptions(temperature=0, num_predict=40, ignore_eos=True),
], ids=["default-penalty", "repeat-penalty", "frequency-presence", "ignore-eos"])
def test_greedy_tokens_are_the_same_with_and_without_drafts(engines: tuple[Engine, Engine],
                                                             oracle: type[OracleDrafter],
                                                             sampling: SamplingOptions) -> None:
    """Bit for bit, one request at a time on CPU: a verification batch of up to five rows runs the
    kernels one row does, and a fresh cache puts the sequence in the same cells. (CUDA kernels
    round a multi-row step differently: on a GPU build this holds only up to near-ties.)"""
    plain, spec = engines
    requests = [GenerateRequest(prompt(20 + 3 * i, 11 * i), sampling) for i in range(4)]
    expected = [r.generated for r in reference(plain, oracle, requests)]
    before = spec.stats()
    got = [collect(spec.submit(r)) for r in requests]
    after = spec.stats()
    assert [r.generated for r in got] == expected
    assert [r.done.eval_count for r in got] == [len(e) for e in expected]
    assert after.generated_tokens - before.generated_tokens == sum(len(e) for e in expected)
    drafted, accepted = after.draft_tokens - before.draft_tokens, after.accepted_tokens - before.accepted_tokens
    assert 0 < accepted < drafted  # whole, partial and rejected drafts all happened
    no_stray_cells(spec)


def test_four_at_once_part_only_at_near_ties(engines: tuple[Engine, Engine], oracle: type[OracleDrafter]) -> None:
    """Side by side, other sequences' draft rows change the batch and freed draft cells move where
    a sequence's next cells land, so attention sums in another order: as under continuous batching
    without drafts, a near-tie may go the other way, and nothing else may differ."""
    plain, spec = engines
    options = SamplingOptions(temperature=0, num_predict=96, repeat_penalty=1.0, logprobs=True, top_logprobs=2)
    requests = [GenerateRequest(prompt(20 + 3 * i, 11 * i), options) for i in range(4)]
    want = reference(plain, oracle, requests)
    got = run_all(spec, requests)
    for w, g in zip(want, got, strict=True):
        same_until_a_near_tie(w, g)
    assert spec.stats().accepted_tokens > 0
    no_stray_cells(spec)


def test_confirmed_drafts_save_steps(engines: tuple[Engine, Engine], oracle: type[OracleDrafter]) -> None:
    plain, spec = engines
    request = GenerateRequest(prompt(16, 3), SamplingOptions(temperature=0, num_predict=200))
    reference(plain, oracle, [request])
    before = spec.stats()
    collect(spec.submit(request))
    assert spec.stats().accepted_tokens - before.accepted_tokens > 60  # over 200 tokens in fewer than 140 steps


@pytest.mark.parametrize("eighths", [1, 3, 6])
def test_stop_string_inside_a_confirmed_draft_ends_the_text_there(engines: tuple[Engine, Engine],
                                                                  oracle: type[OracleDrafter], eighths: int) -> None:
    """Where the stop falls decides whether drafts confirmed after it were sampled in the same step
    (1/8 and 3/8 of the text: they were, and are cut back when the stop shows while the next step
    decodes: batcher.py) or not."""
    plain, spec = engines
    text = reference(plain, oracle, [GenerateRequest(prompt(12, 9), SamplingOptions(temperature=0,
                                                                                    num_predict=120))])[0].text
    stop = text[eighths * len(text) // 8: eighths * len(text) // 8 + 4]
    options = SamplingOptions(temperature=0, num_predict=120, stop=(stop,))
    want = collect(plain.submit(GenerateRequest(prompt(12, 9), options)))
    got = collect(spec.submit(GenerateRequest(prompt(12, 9), options)))
    assert got.text == want.text == text[: text.find(stop)]
    assert got.done.done_reason is DoneReason.STOP
    assert got.done.eval_count == want.done.eval_count
    assert got.done.context == want.done.context
    no_stray_cells(spec)


@pytest.mark.parametrize("num_predict", [1, 2, 3, 5, 17])
def test_num_predict_is_exact(engines: tuple[Engine, Engine], oracle: type[OracleDrafter], num_predict: int) -> None:
    plain, spec = engines
    request = GenerateRequest(prompt(30, 5), SamplingOptions(temperature=0, num_predict=num_predict))
    want = reference(plain, oracle, [request])[0]
    got = collect(spec.submit(request))
    assert got.generated == want.generated and got.done.eval_count == num_predict
    assert got.done.done_reason is DoneReason.LENGTH


def test_the_context_limit_is_exact(tiny_gguf: Path, oracle: type[OracleDrafter]) -> None:
    options = LoadOptions(num_ctx=64, num_parallel=1, num_batch=64)
    request = GenerateRequest(prompt(20, 2), SamplingOptions(temperature=0, num_predict=500))
    with Engine(str(tiny_gguf), dataclasses.replace(options, speculative=False)) as plain:
        want = reference(plain, oracle, [request])[0]
    with Engine(str(tiny_gguf), options) as spec:
        got = collect(spec.submit(request))
        assert spec.stats().accepted_tokens > 0
    assert got.generated == want.generated
    assert len(got.done.context) == 64 and got.done.done_reason is DoneReason.LENGTH


def test_logprobs_come_from_each_tokens_own_row(engines: tuple[Engine, Engine], oracle: type[OracleDrafter]) -> None:
    plain, spec = engines
    options = SamplingOptions(temperature=0, num_predict=48, repeat_penalty=1.0, logprobs=True, top_logprobs=2)
    want = reference(plain, oracle, [GenerateRequest(prompt(10, 4), options)])[0]
    before = spec.stats().accepted_tokens
    got = collect(spec.submit(GenerateRequest(prompt(10, 4), options)))
    assert spec.stats().accepted_tokens > before
    want_lp = [lp for e in want.tokens for lp in e.logprobs]
    got_lp = [lp for e in got.tokens for lp in e.logprobs]
    assert [lp.token for lp in got_lp] == [lp.token for lp in want_lp]
    assert len(got_lp) == 48
    for a, b in zip(got_lp, want_lp, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-3)
        assert a.top[0][0] == a.token  # greedy picks the best of its own row


def test_sampled_and_grammar_requests_never_draft(engines: tuple[Engine, Engine], oracle: type[OracleDrafter]) -> None:
    _, spec = engines
    oracle.references = [[1] * 1000]  # the oracle would draft for anything
    before = spec.stats()
    collect(spec.submit(GenerateRequest(prompt(16, 3), SamplingOptions(temperature=0.8, seed=1, num_predict=64))))
    collect(spec.submit(GenerateRequest("hello", SamplingOptions(temperature=0, num_predict=32), format="json")))
    assert spec.stats().draft_tokens == before.draft_tokens


def test_cancel_while_drafting_frees_every_cell(engines: tuple[Engine, Engine], oracle: type[OracleDrafter]) -> None:
    plain, spec = engines
    request = GenerateRequest(prompt(16, 8), SamplingOptions(temperature=0, num_predict=300))
    reference(plain, oracle, [request])
    handle = spec.submit(request)
    events = 0
    while events < 30:
        assert handle.get(timeout=60) is not None
        events += 1
    handle.cancel()
    assert collect(handle).done.done_reason is DoneReason.CANCELLED
    no_stray_cells(spec)


def test_the_deterministic_mode_does_not_draft(tiny_gguf: Path, oracle: type[OracleDrafter]) -> None:
    request = GenerateRequest(prompt(16, 3), SamplingOptions(temperature=0, num_predict=64))
    oracle.references = [[1] * 1000]
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=256, num_parallel=2, num_batch=64, batch_invariant=True)) as e:
        collect(e.submit(request))
        assert e.stats().draft_tokens == 0


@pytest.mark.parametrize(("cost", "drafts"), [
    (CostModel(fixed=0.0176, per_row=0.0044), True),  # rows nearly free next to the step: draft
    (CostModel(fixed=0.004, per_row=0.036), False),   # every row costs nearly a step: never draft
])
def test_the_measured_cost_decides(engines: tuple[Engine, Engine], oracle: type[OracleDrafter],
                                   monkeypatch: pytest.MonkeyPatch, cost: CostModel, drafts: bool) -> None:
    plain, spec = engines
    request = GenerateRequest(prompt(16, 3), SamplingOptions(temperature=0, num_predict=100))
    want = reference(plain, oracle, [request])[0]
    monkeypatch.setattr(StepCost, "model", lambda self: cost)
    got = collect(spec.submit(request))
    assert got.generated == want.generated
    assert (spec.stats().draft_tokens > 0) is drafts


def test_decode_steps_are_timed(engines: tuple[Engine, Engine]) -> None:
    _, spec = engines
    collect(spec.submit(GenerateRequest(prompt(16, 3), SamplingOptions(temperature=0, num_predict=20))))
    collect(spec.submit(GenerateRequest(prompt(16, 3), SamplingOptions(temperature=0, num_predict=20))))
    cost = spec.batcher.step_cost  # type: ignore[union-attr]
    one_row = sum(mean.count for (rows, _), mean in cost._means.items() if rows == 1)
    assert one_row >= 30  # one-row decode steps of the two requests (the first left out), prefill steps not counted


@pytest.mark.starter
@pytest.mark.slow
def test_a_real_model_repeating_itself_is_drafted_and_says_the_same(gemma_gguf: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 3 270M (base) continuing repeated code: the n-gram drafter's guesses are confirmed,
    and the text is what greedy decoding gives without drafts (every offered draft decoded,
    whatever a row costs on this machine)."""
    monkeypatch.setattr(StepCost, "model", lambda self: None)
    code = "def area(width, height):\n    return width * height\n\n"
    request = GenerateRequest(code * 3 + "def", SamplingOptions(temperature=0, num_predict=64, repeat_penalty=1.0))
    options = LoadOptions(num_ctx=1024, num_parallel=1, num_batch=256)
    with Engine(str(gemma_gguf), dataclasses.replace(options, speculative=False)) as plain:
        want = collect(plain.submit(request))
    with Engine(str(gemma_gguf), options) as spec:
        got = collect(spec.submit(request))
        stats = spec.stats()
    assert got.text == want.text
    assert stats.accepted_tokens >= 32, stats  # at least half the output came in drafts
