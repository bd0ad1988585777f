"""Prompts built to a token length with the target's tokenizer, and honest about approximations."""

from __future__ import annotations

from localrun.bench.prompts import WORDS, PromptBuilder, calibrate


def _samples(unique: int, prefix: int = 0):  # type: ignore[no-untyped-def]
    return lambda b: [(b.prompt(i, unique, prefix), unique + prefix) for i in (0, 1, 997)]


async def _words_plus_bos(text: str) -> int:
    return 1 + len(text.split())


async def test_prompts_have_the_exact_length_the_tokenizer_counts() -> None:
    builder, info = await calibrate(_words_plus_bos, "/extras/tokenize", 0, _samples(128))
    assert info.exact and info.endpoint == "/extras/tokenize"
    for i in range(20):
        assert await _words_plus_bos(builder.prompt(i, 128)) == 128


async def test_shared_prefix_is_identical_and_lengths_add_up() -> None:
    builder, info = await calibrate(_words_plus_bos, "/tokenize", 0, _samples(40, 1300))
    assert info.exact
    a, b = builder.prompt(1, 40, 1300), builder.prompt(2, 40, 1300)
    prefix = builder.prefix(1300)
    assert a.startswith(prefix + " ") and b.startswith(prefix + " ")
    assert await _words_plus_bos(a) == 1340
    assert await _words_plus_bos(prefix) == 1300


def test_distinct_prompts_start_differently_so_no_cache_reuse_inflates_results() -> None:
    builder = PromptBuilder(list(WORDS), overhead=1)
    firsts = {tuple(builder.prompt(i, 64).split()[:3]) for i in range(500)}
    assert len(firsts) == 500
    tails = {tuple(builder.prompt(i, 64, 100).split()[99:102]) for i in range(500)}
    assert len(tails) == 500


def test_prompts_are_deterministic_per_seed() -> None:
    assert PromptBuilder(list(WORDS), 1, seed=3).prompt(5, 50) == PromptBuilder(list(WORDS), 1, seed=3).prompt(5, 50)
    assert PromptBuilder(list(WORDS), 1, seed=3).prompt(5, 50) != PromptBuilder(list(WORDS), 1, seed=4).prompt(5, 50)


async def test_without_a_tokenizer_lengths_are_reported_as_approximate() -> None:
    builder, info = await calibrate(None, None, 0, _samples(64))
    assert not info.exact and "approximate" in info.note
    assert len(builder.prompt(0, 64).split()) == 63  # one token per word plus a BOS


async def test_words_that_are_several_tokens_are_left_out() -> None:
    long_words = {"people", "number", "water", "write"}

    async def count(text: str) -> int:
        return 1 + sum(3 if w in long_words else 1 for w in text.split())

    builder, info = await calibrate(count, "/api/tokenize", 0, _samples(100))
    assert info.exact
    assert not long_words & set(builder.words)
    assert await count(builder.prompt(7, 100)) == 100


async def test_a_tokenizer_that_merges_words_makes_lengths_approximate() -> None:
    async def merging(text: str) -> int:  # every "of the" pair becomes one token
        return 1 + len(text.split()) - text.count("of the")

    _, info = await calibrate(merging, "/tokenize", 0, lambda b: [("of the of the", 5)])
    assert not info.exact and "off by up to 2" in info.note
