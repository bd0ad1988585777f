"""The shared KV pool on the tiny GGUF: admission while it holds a request, preemption, overflow.

A pool smaller than ``num_ctx x num_parallel`` is the daemon's default layout (a request may use
the model's whole trained context; requests share the pool), so these are the engine's contract
for it: nothing is refused or cut that fits an empty pool, every request finishes with the text
it would have had alone, and a prompt that cannot fit is refused at once with both numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import collect, same_until_a_near_tie

from localrun.engine.engine import Engine
from localrun.engine.types import DoneReason, GenerateRequest, LoadOptions, SamplingOptions, Truncation
from localrun.errors import ContextOverflow

POOL = LoadOptions(num_ctx=512, num_parallel=4, num_batch=64, context_pool=640)


def prompt(n: int, offset: int) -> list[int]:
    return [1] + [300 + (offset + 11 * i) % 400 for i in range(n)]


def long_output(n: int) -> SamplingOptions:
    return SamplingOptions(temperature=0, num_predict=n, ignore_eos=True, repeat_penalty=1.0, logprobs=True,
                           top_logprobs=2)


@pytest.fixture(scope="module")
def pooled(tiny_gguf: Path) -> Engine:
    with Engine(str(tiny_gguf), POOL) as engine:
        yield engine  # type: ignore[misc]


def test_a_request_may_use_up_to_num_ctx_capped_by_the_pool(tiny_gguf: Path, pooled: Engine) -> None:
    assert (pooled.info.num_ctx, pooled.info.context_pool) == (512, 640)
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=4096, num_parallel=2, num_batch=64, context_pool=384)) as small:
        assert small.info.num_ctx == 384  # never more than the pool (nor the trained 2,048)


def test_requests_that_outgrow_the_pool_pause_and_resume_with_the_text_they_had_alone(pooled: Engine) -> None:
    """Paused and resumed, a request goes on from the token where it stopped: its text is the one
    it had alone, up to a near-tie: batched beside others, attention sums in another order, as
    under continuous batching without a pause, and the cells it lost while paused are computed
    again as a prompt chunk (f16 cells rounded from a batched matmul, not from one row), so the
    tiny model's flat distributions may part at a gap of a few hundredths. A resume at the wrong
    position would part at once, and by far more."""
    requests = [GenerateRequest(prompt(60, k), long_output(400)) for k in range(3)]
    alone = [collect(pooled.submit(r)) for r in requests]
    batcher = pooled.batcher
    assert batcher is not None
    paused = batcher.preemptions
    handles = [pooled.submit(r) for r in requests]  # 3 x 461 tokens in a pool of 640
    results = [collect(h) for h in handles]
    assert [r.done.done_reason for r in results] == [DoneReason.LENGTH] * 3
    for want, got in zip(alone, results, strict=True):
        same_until_a_near_tie(want, got, margin=0.05)
    assert [r.done.prompt_eval_count for r in results] == [61] * 3  # resuming recounts nothing
    assert batcher.preemptions > paused  # the pool really was outgrown
    assert pooled.stats().slots_active == 0
    batcher.kv.check_integrity()


def test_many_requests_beyond_the_pool_wait_their_turn_and_all_finish(pooled: Engine) -> None:
    handles = [pooled.submit(GenerateRequest(prompt(200 + k, k), long_output(40))) for k in range(12)]
    results = [collect(h) for h in handles]
    assert all(r.done.done_reason is DoneReason.LENGTH and r.done.eval_count == 40 for r in results)
    assert all(r.done.truncated_tokens == 0 for r in results)  # nothing cut to make room
    pooled.batcher.kv.check_integrity()  # type: ignore[union-attr]


def test_a_prompt_no_empty_pool_could_hold_is_refused_at_once_naming_both_numbers(pooled: Engine) -> None:
    with pytest.raises(ContextOverflow) as caught:
        pooled.submit(GenerateRequest(prompt(600, 0), long_output(4), truncation=Truncation.REJECT))
    assert (caught.value.prompt_tokens, caught.value.max_tokens) == (601, 512)
    assert "601" in str(caught.value) and "512" in str(caught.value)
