"""A long prompt that begins like a recent one reuses that one's tokens (engine/tokencache.py):
always exactly the tokens llama.cpp gives the whole text, on real vocabularies and on edits that
land anywhere (inside a word, inside a special token, right after one)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import collect, vocab_of

from localrun.engine import native
from localrun.engine.engine import Engine
from localrun.engine.tokencache import GIVE_UP, MIN_BYTES, PromptTokenizer, common_prefix
from localrun.engine.types import GenerateRequest, LoadOptions, SamplingOptions

WORDS = ["the", "model", "reads", "def", "return", "x", "  ", "\n", "é", "日本語", "```", "{\"a\": 1}", "self.", "==",
         "<tool_call>", "</tool_call>", "<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|im_start", "|>", "<"]


@pytest.fixture(scope="module")
def qwen_gguf(starter_models: Path) -> Path:
    return max((starter_models / "blobs").iterdir(), key=lambda p: p.stat().st_size)


@pytest.fixture(scope="module")
def qwen_vocab(qwen_gguf: Path) -> Iterator[native.Vocab]:
    yield from vocab_of(qwen_gguf)


def message(rng: random.Random, n: int) -> str:
    role = rng.choice(["system", "user", "assistant", "tool"])
    return f"<|im_start|>{role}\n" + " ".join(rng.choice(WORDS) for _ in range(n)) + "<|im_end|>\n"


def edits(rng: random.Random, turns: int) -> Iterator[str]:
    """A conversation that grows, is edited, cut mid-text and given raw tails, as clients do."""
    text = "".join(message(rng, rng.randrange(20, 200)) for _ in range(40))
    for _ in range(turns):
        r = rng.random()
        if r < 0.45:
            text += message(rng, rng.randrange(5, 150))
        elif r < 0.65:
            text = text[:rng.randrange(len(text))] + message(rng, 30)
        elif r < 0.85:
            text += rng.choice(["hello", " ", "\n", "<|im_start|>assistant\n", "é", "<|im_", "<tool_call>"])
        else:
            text = text[:rng.randrange(len(text) // 2, len(text))]
        yield text


def check_same_tokens(vocab: native.Vocab, seed: int, turns: int = 120) -> PromptTokenizer:
    prompts = PromptTokenizer(vocab)
    rng = random.Random(seed)
    for text in edits(rng, turns):
        add_special = rng.random() < 0.8
        assert prompts.tokenize(text, add_special=add_special) == vocab.tokenize(text, add_special=add_special)
    return prompts


@pytest.mark.starter
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_bpe_vocabulary_gets_the_whole_texts_tokens_while_reusing_most_of_them(
        qwen_vocab: native.Vocab, seed: int) -> None:
    prompts = check_same_tokens(qwen_vocab, seed)
    assert prompts.reused_tokens > 20_000  # the cache did the work, not a fallback


@pytest.mark.starter
def test_a_sentencepiece_vocabulary_gets_the_whole_texts_tokens(gemma_gguf: Path) -> None:
    """Gemma's tokens do not always spell its text back (the space prefix): whatever it remembers
    or not, the tokens are the whole text's."""
    for vocab in vocab_of(gemma_gguf):
        check_same_tokens(vocab, 3, turns=60)


def test_the_tiny_models_vocabulary_gets_the_whole_texts_tokens(tiny_gguf: Path) -> None:
    for vocab in vocab_of(tiny_gguf):
        check_same_tokens(vocab, 4, turns=60)


def test_a_vocabulary_that_cannot_spell_its_texts_back_stops_being_checked(tiny_gguf: Path) -> None:
    """The tiny model's SentencePiece tokens add a space prefix: after GIVE_UP long texts none of which
    its tokens spelled back, a long prompt is tokenized whole without the check."""
    for vocab in vocab_of(tiny_gguf):
        prompts = PromptTokenizer(vocab)
        rng = random.Random(6)
        texts = ["".join(message(rng, 150) for _ in range(8)) for _ in range(GIVE_UP + 1)]
        for text in texts[:GIVE_UP]:
            assert prompts.tokenize(text) == vocab.tokenize(text)
        assert not prompts.enabled
        assert prompts.tokenize(texts[-1]) == vocab.tokenize(texts[-1])


@pytest.mark.starter
def test_a_special_token_inside_another_is_never_cut_before(qwen_vocab: native.Vocab) -> None:
    """``<|im_start|>`` and friends are cut points; a token whose text occurs inside another special
    token's text is not (the longer one could match across the cut)."""
    prompts = PromptTokenizer(qwen_vocab)
    specials = qwen_vocab.special_tokens()
    im_start = next(t for t, s in specials.items() if s.text == b"<|im_start|>")
    assert prompts._cuttable(im_start, specials[im_start])
    fake = native.SpecialToken(b"im_start", strips=False)  # occurs inside <|im_start|>
    assert not prompts._cuttable(-1, fake)
    assert not prompts._cuttable(-2, native.SpecialToken(b"<x>", strips=True))


def test_common_prefix_finds_where_two_texts_part() -> None:
    a = bytes(range(256)) * 100
    for cut in (0, 1, 4095, 4096, 4097, 12_345, len(a) - 1):
        b = a[:cut] + b"\xff\xfe" + a[cut:]
        assert common_prefix(a, b) == cut + (a[cut:cut + 1] == b"\xff")
    assert common_prefix(a, a) == len(a)
    assert common_prefix(a, a[:100]) == 100


@pytest.mark.starter
def test_texts_remembered_in_the_background_are_reused_once_settled(qwen_vocab: native.Vocab) -> None:
    """The engine's tokenizer hands remembering to its own thread: the caller's tokens are the whole
    text's at once, and the next turn reuses them once the thread has caught up."""
    threads_before = threading.active_count()
    prompts = PromptTokenizer(qwen_vocab, background=True)
    rng = random.Random(11)
    text = "".join(message(rng, 120) for _ in range(12))
    grown = text + message(rng, 20)
    try:
        assert prompts.tokenize(text) == qwen_vocab.tokenize(text)
        prompts.settle()
        assert prompts.tokenize(grown) == qwen_vocab.tokenize(grown)
        assert prompts.reused_tokens > 0
    finally:
        prompts.close()
    prompts.close()  # idempotent
    last = grown + message(rng, 20)
    assert prompts.tokenize(last) == qwen_vocab.tokenize(last)  # still right after close(), remembering nothing
    assert threading.active_count() == threads_before


@pytest.mark.starter
@pytest.mark.allow_5xx(reason="the logged exception is the bug this test injects")
def test_a_text_that_fails_to_be_remembered_costs_only_itself(qwen_vocab: native.Vocab,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    prompts = PromptTokenizer(qwen_vocab, background=True)
    real = prompts._remember
    calls: list[int] = []

    def fails_once(*args: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        real(*args)

    monkeypatch.setattr(prompts, "_remember", fails_once)
    rng = random.Random(12)
    text = "".join(message(rng, 120) for _ in range(12))
    try:
        assert prompts.tokenize(text) == qwen_vocab.tokenize(text)
        prompts.settle()  # returns: the failure did not take the thread with it
        assert prompts.tokenize(text) == qwen_vocab.tokenize(text)
        prompts.settle()
        grown = text + message(rng, 20)
        assert prompts.tokenize(grown) == qwen_vocab.tokenize(grown)
        assert prompts.reused_tokens > 0
    finally:
        prompts.close()


@pytest.mark.starter
@pytest.mark.slow
def test_an_agents_next_turn_is_read_as_the_whole_texts_tokens(qwen_gguf: Path) -> None:
    """The engine's prompts go through the cache: a grown conversation is read as exactly the tokens
    llama.cpp gives the whole text, and counted so."""
    engine = Engine(str(qwen_gguf), LoadOptions(num_ctx=4096, num_parallel=2, num_batch=512))
    try:
        rng = random.Random(5)
        text = "".join(message(rng, 120) for _ in range(12))
        assert len(text.encode()) >= MIN_BYTES
        collect(engine.submit(GenerateRequest(text + "<|im_start|>assistant\n", SamplingOptions(temperature=0,
                                                                                                num_predict=2))))
        grown = text + message(rng, 20) + "<|im_start|>assistant\n"
        engine.prompts.settle()  # remembered in the background
        before = engine.prompts.reused_tokens
        done = collect(engine.submit(GenerateRequest(grown, SamplingOptions(temperature=0, num_predict=2)))).done
        assert engine.prompts.reused_tokens > before
        ids = engine.vocab.tokenize(grown)
        assert done.prompt_eval_count == len(ids)
        assert list(done.context[:len(ids)]) == ids
        assert engine.tokenize(grown) == ids
    finally:
        engine.close()
