"""Cancelling stops sampling work at the next sampling point (issue #13, point 5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import collect

from localrun.engine.engine import Engine
from localrun.engine.types import (
    DoneReason,
    GenerateRequest,
    LoadOptions,
    SamplingOptions,
)
from localrun.errors import EngineError


def words(n: int, offset: int = 0) -> list[int]:
    """A deterministic token-id prompt (BOS + n ordinary tokens)."""
    return [1] + [300 + (offset + 7 * i) % 400 for i in range(n)]


def test_a_request_cancelled_during_a_step_is_not_sampled_in_it(tiny_gguf: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A slow sampling step (a costly grammar) must not also sample requests cancelled meanwhile: they
    # stop at the next sampling point, not one token later (issue #13, point 5).
    from localrun.engine import batcher as batcher_module

    with Engine(str(tiny_gguf), LoadOptions(num_ctx=256, num_parallel=2, num_batch=64)) as engine:
        handles = [engine.submit(GenerateRequest(words(8, seed), SamplingOptions(num_predict=None, ignore_eos=True)))
                   for seed in (1, 2)]
        for handle in handles:
            assert handle.get(timeout=60) is not None
        real = batcher_module.sample
        calls: list[object] = []

        def cancel_everyone_while_sampling(sampler: object, *args: object, **kwargs: object) -> int:
            calls.append(sampler)
            if len(calls) == 1:
                for handle in handles:
                    handle.cancel()
            return int(real(sampler, *args, **kwargs))  # type: ignore[arg-type]

        monkeypatch.setattr(batcher_module, "sample", cancel_everyone_while_sampling)
        results = [collect(handle) for handle in handles]
    assert [r.done.done_reason for r in results] == [DoneReason.CANCELLED] * 2
    assert len(calls) == 1  # the other request of that step was not sampled after its cancel


@pytest.mark.allow_5xx(reason="the simulated bug is logged as an unhandled engine exception, as a real one must be")
def test_a_bug_while_admitting_a_request_answers_it_with_an_error_and_the_engine_serves_on(
        tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception inside admission (a bug) must reach the request it hit, never leave it waiting."""
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=256, num_parallel=2)) as engine:
        kv = engine.batcher.kv  # type: ignore[union-attr]
        real_acquire = kv.acquire
        calls = 0

        def acquire_failing_once(prompt: list[int], *args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("simulated bug in admission")
            return real_acquire(prompt, *args, **kwargs)

        monkeypatch.setattr(kv, "acquire", acquire_failing_once)
        request = GenerateRequest([1, 300, 301, 302], SamplingOptions(temperature=0, num_predict=4))
        with pytest.raises(EngineError, match="simulated bug in admission"):
            collect(engine.submit(request), timeout=10)
        assert collect(engine.submit(request), timeout=30).done.eval_count == 4
