"""Seeds on the real starter model (Gemma 3 270M): what reproduces and what does not yet.

Gemma 3 turns a last-bit difference inside one layer into up to ~1 logit. With flash attention
off, where a sequence's cells sat in the unified KV cache changed its logits, so even a seeded
request repeated alone on the same engine changed its text (this file's first test failed with
those settings). native.py explains the setting that fixes that (LOCALRUN_KV_CACHE_TYPE=bf16). Running alongside other
requests still changes the text (second test, expected to fail): llama.cpp's CPU matmuls round
differently for batches of 8 or more tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_helpers import Result, collect

from localrun.engine.engine import Engine
from localrun.engine.sequence import RequestHandle
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


@pytest.fixture(scope="module")
def engine(starter_gguf: Path) -> Iterator[Engine]:
    """The starter with LOCALRUN_KV_CACHE_TYPE=bf16 (the CPU default), which promises repeatable seeds."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCALRUN_KV_CACHE_TYPE", "bf16")
        engine = Engine(str(starter_gguf), LoadOptions(num_ctx=512, num_parallel=8, num_batch=64))
    with engine as e:
        yield e


def seeded(seed: int) -> SamplingOptions:
    # Ollama's defaults (temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1) plus a seed
    return SamplingOptions(seed=seed, num_predict=N, logprobs=True)


def other(i: int) -> GenerateRequest:
    return GenerateRequest(OTHERS[i % len(OTHERS)], SamplingOptions(seed=100 + i, num_predict=30 + 15 * i))


def with_seven_others(engine: Engine, request: GenerateRequest) -> Result:
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

    def __init__(self, handle: RequestHandle, first: object) -> None:
        self.handle, self.first = handle, first

    def get(self, timeout: float | None = None) -> object:
        if self.first is not None:
            event, self.first = self.first, None
            return event
        return self.handle.get(timeout=timeout)


def churn(engine: Engine) -> None:
    """Requests of many lengths, so the cache holds (and evicts) other prefixes elsewhere."""
    for r in range(2):
        handles = [engine.submit(GenerateRequest(OTHERS[(3 * i + r) % len(OTHERS)] + f" ({r}.{i})" * (5 * i),
                                                 SamplingOptions(seed=i, num_predict=10 + 8 * i)))
                   for i in range(8)]
        for h in handles:
            collect(h)


def logprobs(result: Result) -> list[float]:
    return [t.logprobs[0].logprob for t in result.tokens if t.logprobs]


def test_same_seed_same_text_when_repeated_alone_also_after_churn(engine: Engine) -> None:
    request = GenerateRequest(TARGET, seeded(42))
    alone = collect(engine.submit(request))
    assert alone.done.eval_count == N and len(alone.text) > 50
    again = collect(engine.submit(request))  # its prompt now comes from the prefix cache
    assert again.done.cached_tokens > 0
    assert again.text == alone.text
    churn(engine)
    after_churn = collect(engine.submit(request))
    assert after_churn.text == alone.text
    # not bit for bit: a cached prompt's last token is decoded in a 1-token batch (see the xfail)
    assert max(abs(a - b) for a, b in zip(logprobs(after_churn), logprobs(alone))) < 0.05
    assert collect(engine.submit(GenerateRequest(TARGET, seeded(43)))).text != alone.text


@pytest.mark.xfail(reason="llama.cpp's CPU matmuls round differently for batches of < 8 and >= 8 tokens "
                          "(measured: the Q4_K attention-output matmul of layer 0 already differs) and "
                          "Gemma 3 amplifies a last-bit change to ~1 logit; see BENCHMARKS.md, Known limits",
                   strict=False)
def test_same_seed_same_text_with_seven_other_requests_alongside(engine: Engine) -> None:
    request = GenerateRequest(TARGET, seeded(42))
    alone = collect(engine.submit(request))
    together = with_seven_others(engine, request)
    assert together.text == alone.text
