"""Seeds on a real model (Gemma 3 270M, the former starter) in the deterministic mode (the batch_invariant
load option): the same seed gives the same text, bit for bit, whatever runs alongside.

Gemma 3 turns a last-bit difference inside one layer into up to ~1 logit, so only bit-identical
computation gives identical text. Three things change those bits with llama.cpp's fastest kernels
(native.py), and the deterministic mode avoids each:
- where a sequence's cells sit in the unified KV cache: flash attention with a BF16-key cache
  walks a query's own cells in order, and freed cells are parked to keep that order;
- the 1-token-batch split of the F16 flash-attention kernel: avoided by BF16 keys likewise;
- how many tokens share the batch: llama.cpp's tiled K-quant matmul (8+ tokens) rounds
  differently from its per-row kernel; the mode turns it off for the whole runner process.
With all three, a seeded request gives the same tokens and log-probabilities alone, repeated
from the prefix cache, after the cache churned, and among seven other requests (BENCHMARKS.md,
Known limits). llama.cpp picks its matmul kernels once per process, so these engines run in
runner processes of their own, as the daemon runs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from engine_helpers import Handle, Result, RunnerEngine, collect

from localrun.engine.types import (
    GenerateRequest,
    LoadOptions,
    SamplingOptions,
    TokenEvent,
)

pytestmark = [pytest.mark.starter, pytest.mark.slow]

N = 48
SYSTEM = ("You are a guide in a small museum of maritime history. You answer visitors' questions "
          "about ships, harbours and the lives of sailors, in plain words.\n\n")
TARGET = SYSTEM + "Question: How did sailors find their longitude at sea?\nAnswer:"
OTHERS = [
    "The history of the printing press begins",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Recipe for bread: flour, water, salt and yeast. First, " * 3,
    "Les montagnes des Alpes sont",
    " ".join(f"Item {i}: a list of things to remember." for i in range(30)),
    "In 1969 the first humans landed on the Moon. The mission",
    SYSTEM + "Question: Why were ships painted with tar?\nAnswer:",
]


def deterministic(num_ctx: int = 512, num_parallel: int = 8) -> LoadOptions:
    return LoadOptions(num_ctx=num_ctx, num_parallel=num_parallel, num_batch=64, batch_invariant=True)


@pytest.fixture(scope="module")
def engine(gemma_gguf: Path) -> Iterator[RunnerEngine]:
    """Gemma in the deterministic mode, in a runner process of its own."""
    with RunnerEngine(str(gemma_gguf), deterministic()) as e:
        yield e


def seeded(seed: int) -> SamplingOptions:
    # Ollama's defaults (temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1) plus a seed
    return SamplingOptions(seed=seed, num_predict=N, logprobs=True)


def other(i: int) -> GenerateRequest:
    return GenerateRequest(OTHERS[i % len(OTHERS)], SamplingOptions(seed=100 + i, num_predict=30 + 15 * i))


def with_seven_others(engine: RunnerEngine, request: GenerateRequest) -> Result:
    """``request`` started while 4 others generate; 3 more join once it has produced tokens."""
    before = [engine.submit(other(i)) for i in range(4)]
    assert isinstance(before[0].get(timeout=120), TokenEvent)  # the others are generating
    handle = engine.submit(request)
    first = handle.get(timeout=120)
    after = [engine.submit(other(i)) for i in range(4, 7)]
    result = collect(_Replay(handle, first))
    for h in before + after:
        collect(h)
    return result


class _Replay:
    """A handle whose first event was already read."""

    def __init__(self, handle: Handle, first: object) -> None:
        self.handle, self.first = handle, first

    def get(self, timeout: float | None = None) -> object:
        if self.first is not None:
            event, self.first = self.first, None
            return event
        return self.handle.get(timeout=timeout)


def churn(engine: RunnerEngine, rounds: int = 2, requests: int = 8, repeat: int = 5) -> None:
    """Requests of many lengths, so the cache holds (and evicts) other prefixes elsewhere."""
    for r in range(rounds):
        handles = [engine.submit(GenerateRequest(OTHERS[(3 * i + r) % len(OTHERS)] + f" ({r}.{i})" * (repeat * i),
                                                 SamplingOptions(seed=i, num_predict=10 + 8 * i)))
                   for i in range(requests)]
        for h in handles:
            collect(h)


def logprobs(result: Result) -> list[float]:
    return [t.logprobs[0].logprob for t in result.tokens if t.logprobs]


def test_same_seed_same_text_when_repeated_alone_also_after_churn(engine: RunnerEngine) -> None:
    request = GenerateRequest(TARGET, seeded(42))
    alone = collect(engine.submit(request))
    assert alone.done.eval_count == N and len(alone.text) > 50
    again = collect(engine.submit(request))  # its prompt now comes from the prefix cache
    assert again.done.cached_tokens > 0
    assert again.text == alone.text
    churn(engine)
    after_churn = collect(engine.submit(request))
    assert after_churn.text == alone.text
    assert logprobs(after_churn) == logprobs(alone)  # bit for bit
    assert collect(engine.submit(GenerateRequest(TARGET, seeded(43)))).text != alone.text


def test_same_seed_same_text_with_seven_other_requests_alongside(engine: RunnerEngine) -> None:
    request = GenerateRequest(TARGET, seeded(42))
    alone = collect(engine.submit(request))
    together = with_seven_others(engine, request)
    assert together.text == alone.text
    assert logprobs(together) == logprobs(alone)


def test_greedy_and_seeded_text_unchanged_by_a_cached_system_prompt_and_seven_others(gemma_gguf: Path) -> None:
    """Reference: each request alone in a fresh engine. Then, in another engine, an earlier request
    puts the system prompt in the prefix cache and the request runs among seven others."""
    requests = [GenerateRequest(TARGET, seeded(7)),
                GenerateRequest(TARGET, SamplingOptions(temperature=0, num_predict=N, logprobs=True))]
    with RunnerEngine(str(gemma_gguf), deterministic()) as fresh:
        reference = [collect(fresh.submit(r)) for r in requests]
    with RunnerEngine(str(gemma_gguf), deterministic()) as engine:
        collect(engine.submit(GenerateRequest(SYSTEM + "Question: What is a keel?\nAnswer:", seeded(1))))
        for request, ref in zip(requests, reference, strict=False):
            together = with_seven_others(engine, request)
            assert together.done.cached_tokens > 0  # the system prompt came from the cache
            assert together.text == ref.text
            assert logprobs(together) == logprobs(ref)


def test_same_seed_same_text_after_the_cache_filled_up(gemma_gguf: Path) -> None:
    """A small cache that long requests fill: the engine hands its parked cells back to llama.cpp,
    which can place new cells below older ones; the next request into the idle engine then
    starts from a cleared cache (cells in order again) instead of reusing out-of-order cells."""
    with RunnerEngine(str(gemma_gguf), deterministic(num_ctx=256, num_parallel=4)) as engine:
        request = GenerateRequest(TARGET, seeded(42))
        alone = collect(engine.submit(request))
        # measured: with these rounds, the request kept only part of its text without the reset
        churn(engine, rounds=4, requests=4, repeat=12)
        after = collect(engine.submit(request))
        assert engine.stats().kv_cache_resets >= 1  # the cache did fill up
        assert after.text == alone.text
        assert logprobs(after) == logprobs(alone)


def test_same_text_on_one_thread_and_on_two_past_512_cells(gemma_gguf: Path) -> None:
    """The thread count follows the free cores, so it may differ between two runs of a request. Past
    512 cells the F16 cache's one-token attention sums one part of the cells per thread (here the
    default mode's log-probabilities differ between 1 and 2 threads; a longer prompt parted at the
    fourth greedy token); the mode's BF16 keys take the path that does not split, so the count
    changes nothing."""
    prompt = " ".join(f"In year {1800 + i} the town council met about the harbour, the mill and the school."
                      for i in range(40)) + "\nSummary of the decade:"
    request = GenerateRequest(prompt, SamplingOptions(temperature=0, num_predict=24, logprobs=True))
    results = []
    for threads in (1, 2):
        with RunnerEngine(str(gemma_gguf), replace(deterministic(num_ctx=1024, num_parallel=1),
                                                   num_thread=threads)) as engine:
            results.append(collect(engine.submit(request)))
    one, two = results
    assert one.done.prompt_eval_count > 560
    assert two.text == one.text
    assert logprobs(two) == logprobs(one)


def test_fast_kernels_same_seed_same_text_when_repeated_alone(gemma_gguf: Path) -> None:
    """The default mode (llama.cpp's fastest kernels, an F16 cache): a seeded request run again on its
    own repeats its text, with its prompt from the prefix cache and the cache fuller each time, on the
    same thread count (pinned here: it follows the free cores, and under load the runs could differ)."""
    with RunnerEngine(str(gemma_gguf), LoadOptions(num_ctx=1024, num_parallel=8, num_thread=1)) as fast:
        for seed in (42, 7):
            request = GenerateRequest(TARGET, SamplingOptions(seed=seed, num_predict=100, ignore_eos=True,
                                                              logprobs=True))
            runs = [collect(fast.submit(request)) for _ in range(3)]
            assert runs[2].done.cached_tokens == runs[2].done.prompt_eval_count - 1
            assert all(r.text == runs[0].text and logprobs(r) == logprobs(runs[0]) for r in runs), seed
