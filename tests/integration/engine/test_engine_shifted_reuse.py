"""Shifted reuse (``cache_reuse``, llama-server's ``--cache-reuse``): a prompt that drops a block from
the middle of a cached one reads only what is new.

What a user notices: an editor's next completion, whose prompt starts a few lines further down the
file, comes back without reading the whole file part again (``cached_tokens`` says how much was
reused), and says what it would have said reading it all: exactly so on a one-layer model, whose keys
and values depend on no other token (only their rotation moves with the position), and at least the
same first tokens on deeper ones (llama-server makes the same trade).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from engine_helpers import Result, collect, same_until_a_near_tie
from tinymodel import write_tiny_gguf

from localrun.engine.engine import Engine
from localrun.engine.types import GenerateRequest, LoadOptions, SamplingOptions

GREEDY = SamplingOptions(temperature=0, num_predict=12, logprobs=True, top_logprobs=2)
OPTIONS = LoadOptions(num_ctx=1024, num_parallel=2, num_batch=128)
HEAD = [1] + [300 + (7 * i) % 400 for i in range(30)]       # the prefix both prompts share
BLOCK = [20 + (11 * i) % 250 for i in range(40)]            # in the first prompt only
TAIL = [310 + (13 * i) % 350 for i in range(120)]            # both, 40 positions apart
NEW = [50, 60, 70, 80]


def ask(engine: Engine, prompt: list[int], reuse: int) -> Result:
    return collect(engine.submit(GenerateRequest(prompt, GREEDY, cache_reuse=reuse)))


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("one-layer") / "one-layer.gguf", n_layer=1, seed=3)


def test_a_block_cut_from_a_cached_prompt_is_not_read_again_and_changes_nothing_on_one_layer(
        one_layer: Path) -> None:
    second = HEAD + TAIL + NEW
    with Engine(str(one_layer), OPTIONS) as engine:
        fresh = ask(engine, second, 0)  # nothing cached yet: read whole
    with Engine(str(one_layer), OPTIONS) as engine:
        ask(engine, HEAD + BLOCK + TAIL, 64)
        reused = ask(engine, second, 64)
        kv = engine.batcher.kv  # type: ignore[union-attr]
        assert kv.shifted_tokens == len(TAIL)
        kv.check_integrity()
        kv.check_cells()
        again = ask(engine, second, 64)  # its own path is cached now: an exact prefix
    assert fresh.done.cached_tokens == 0
    assert reused.done.cached_tokens == len(HEAD) + len(TAIL)
    same_until_a_near_tie(fresh, reused, margin=0.01)
    assert again.done.cached_tokens == len(second) - 1 and again.generated == reused.generated


def test_without_cache_reuse_or_below_its_run_length_the_prompt_is_read_again(tiny_gguf: Path) -> None:
    answers = []
    for reuse in (0, len(TAIL) + 1):
        with Engine(str(tiny_gguf), OPTIONS) as engine:
            ask(engine, HEAD + BLOCK + TAIL, reuse)
            answers.append(ask(engine, HEAD + TAIL + NEW, reuse))
            assert engine.batcher.kv.shifted_tokens == 0  # type: ignore[union-attr]
    assert [a.done.cached_tokens for a in answers] == [len(HEAD), len(HEAD)]


def test_reused_cells_leave_the_cached_prompt_whole(tiny_gguf: Path) -> None:
    """The shifted cells are a copy: the prompt they came from is still answered from the cache, the
    same as before, and two requests reusing it at once each get their own."""
    first_prompt = HEAD + BLOCK + TAIL
    with Engine(str(tiny_gguf), OPTIONS) as engine:
        first = ask(engine, first_prompt, 0)
        handles = [engine.submit(GenerateRequest(HEAD + TAIL + [n], GREEDY, cache_reuse=64)) for n in (90, 91)]
        both = [collect(h) for h in handles]
        back = ask(engine, first_prompt, 64)
        kv = engine.batcher.kv  # type: ignore[union-attr]
        kv.check_integrity()
        kv.check_cells()
    assert all(r.done.cached_tokens == len(HEAD) + len(TAIL) for r in both)
    assert back.done.cached_tokens == len(first_prompt) - 1 and back.generated == first.generated


def test_a_prompt_cached_in_between_does_not_hide_the_one_to_reuse(tiny_gguf: Path) -> None:
    """llama.vim's warm-up requests (other files, no completion) come between two completions: the
    runs are taken from whichever recent cached prompt gives most, not only the latest."""
    with Engine(str(tiny_gguf), OPTIONS) as engine:
        ask(engine, HEAD + BLOCK + TAIL, 64)
        ask(engine, HEAD + [5, 6, 7, 8] * 10, 64)  # the latest cached prompt, nothing to reuse in it
        moved = ask(engine, HEAD + TAIL + NEW, 64)
    assert moved.done.cached_tokens == len(HEAD) + len(TAIL)


NEW_BLOCK = [600 + (17 * i) % 300 for i in range(12)]  # text in place of BLOCK: read, then TAIL reused


def test_new_text_in_place_of_a_cached_block_is_read_and_what_follows_is_reused(one_layer: Path) -> None:
    """A new session's first words before an agent's unchanged system message: llama-server's scan
    stops at the first new token; the run after it is reused here too, and on one layer the answer
    is what reading the whole prompt gives."""
    second = HEAD + NEW_BLOCK + TAIL + NEW
    with Engine(str(one_layer), OPTIONS) as engine:
        fresh = ask(engine, second, 0)
    with Engine(str(one_layer), OPTIONS) as engine:
        ask(engine, HEAD + BLOCK + TAIL, 64)
        reused = ask(engine, second, 64)
        kv = engine.batcher.kv  # type: ignore[union-attr]
        assert kv.shifted_tokens == len(TAIL)
        kv.check_integrity()  # the spare id that held TAIL is free again
        kv.check_cells()
        again = ask(engine, second, 64)
    assert reused.done.cached_tokens == len(HEAD) + len(TAIL)
    assert reused.done.prompt_eval_count == len(second)
    same_until_a_near_tie(fresh, reused, margin=0.01)
    assert again.done.cached_tokens == len(second) - 1 and again.generated == reused.generated


def test_a_request_that_ends_before_it_reaches_its_reused_run_gives_the_run_back(tiny_gguf: Path) -> None:
    """Cancelled while it reads the new text (several steps of it): the cells waiting for it go, and
    every sequence id is accounted for."""
    long_new = [600 + (17 * i) % 230 for i in range(500)]  # four 128-token steps before TAIL
    options = LoadOptions(num_ctx=1024, num_parallel=2, num_batch=128)
    with Engine(str(tiny_gguf), options) as engine:
        ask(engine, HEAD + BLOCK + TAIL, 64)
        kv = engine.batcher.kv  # type: ignore[union-attr]
        handle = engine.submit(GenerateRequest(HEAD + long_new + TAIL + NEW, GREEDY, cache_reuse=64))
        deadline = time.monotonic() + 30
        while kv.shifted_tokens == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        handle.cancel()
        result = collect(handle)
        assert kv.shifted_tokens == len(TAIL)  # it had been admitted with the run waiting
        kv.check_integrity()
        kv.check_cells()
        after = ask(engine, HEAD + BLOCK + TAIL + NEW, 0)  # the cache still serves its prompt
    assert result.done.done_reason.value in ("cancelled", "length")
    assert after.done.cached_tokens == len(HEAD + BLOCK + TAIL)


def test_runs_past_new_text_are_read_when_no_id_may_hold_them(tiny_gguf: Path) -> None:
    """The ids gapped runs may hold are bounded so that every slot can still be admitted
    (KVCache._holding_cap); past that bound the run is read, and the answer is the same."""
    with Engine(str(tiny_gguf), OPTIONS) as engine:
        kv = engine.batcher.kv  # type: ignore[union-attr]
        kv._holding_cap = 0
        ask(engine, HEAD + BLOCK + TAIL, 64)
        read = ask(engine, HEAD + NEW_BLOCK + TAIL + NEW, 64)
        assert kv.shifted_tokens == 0
        kv.check_integrity()
    assert read.done.cached_tokens == len(HEAD)
