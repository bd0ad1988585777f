"""Fill-in-the-middle prompts for llama-server's ``/infill`` (engine/infill.py): laid out with the
model's FIM tokens as llama-server lays them out, user text kept as text, and what does not fit cut
as llama-server cuts it, with the count returned so the reply can say so."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_helpers import vocab_of
from tinymodel import write_tiny_gguf

from localrun.engine import native
from localrun.engine.infill import infill_tokens
from localrun.engine.types import Infill
from localrun.errors import UnsupportedCapability


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[native.Vocab]:
    yield from vocab_of(write_tiny_gguf(tmp_path_factory.mktemp("fim") / "fim.gguf", fim=True))


def _id(vocab: native.Vocab, text: str) -> int:
    (token,) = vocab.tokenize(text, add_special=False, parse_special=True)
    return token


def test_the_parts_take_their_places_around_the_fim_tokens(vocab: native.Vocab) -> None:
    text = lambda s: vocab.tokenize(s, add_special=False, parse_special=False)  # noqa: E731
    pre, suf, mid, rep, sep = (_id(vocab, t) for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                                                       "<|repo_name|>", "<|file_sep|>"))
    infill = Infill("def f(x):\n    ", "\nprint(f(2))\n", middle="return", extra=(("a.py", "x = 1\n"),))
    tokens, cut = infill_tokens(vocab, infill, n_ctx=4096, n_batch=2048, n_predict=64)
    bos = [vocab.bos] if vocab.add_bos else []
    assert tokens == ([rep, *text("myproject\n"), sep, *text("a.py\n"), *text("x = 1\n"), sep, *text("filename\n"),
                       *bos, pre, *text("def f(x):\n    "), *vocab.tokenize("return", add_special=False,
                                                                             parse_special=True),
                       suf, *text("\nprint(f(2))\n"), mid])
    assert cut == 0


def test_special_token_text_in_the_code_stays_text(vocab: native.Vocab) -> None:
    tokens, _ = infill_tokens(vocab, Infill("<|fim_middle|>", ""), n_ctx=4096, n_batch=2048, n_predict=8)
    assert tokens.count(_id(vocab, "<|fim_middle|>")) == 1  # only the one the layout puts last
    assert tokens[-1] == _id(vocab, "<|fim_middle|>")


def test_what_does_not_fit_is_cut_near_the_gap_kept_and_counted(vocab: native.Vocab) -> None:
    prefix, suffix = "the " * 300, "and " * 300
    extra = tuple((f"f{i}.py", "water " * 100) for i in range(20))
    n_prefix = len(vocab.tokenize(prefix, add_special=False, parse_special=False))
    tokens, cut = infill_tokens(vocab, Infill(prefix, suffix, extra=extra), n_ctx=1024, n_batch=256, n_predict=32)
    # prefix: its last 3/4 of a batch; suffix: its first 1/4 less two; extra: what the context leaves
    assert len(tokens) <= 1024 - 32 and cut > 0
    pre, suf = _id(vocab, "<|fim_prefix|>"), _id(vocab, "<|fim_suffix|>")
    assert tokens.index(suf) - tokens.index(pre) - 1 == min(n_prefix, 192)
    assert len(tokens) - tokens.index(suf) - 2 == 62
    kept = len(tokens) - (1 if vocab.add_bos else 0) - 3 - 192 - 62
    assert kept == 1024 - 256 - 64  # the extra chunks' last tokens
    total = len(infill_tokens(vocab, Infill(prefix, suffix, extra=extra), n_ctx=1 << 20, n_batch=1 << 16,
                              n_predict=32)[0])
    assert cut == total - len(tokens)


def test_a_model_without_fim_tokens_says_it_cannot_insert(tmp_path: Path) -> None:
    for plain in vocab_of(write_tiny_gguf(tmp_path / "plain.gguf")):
        with pytest.raises(UnsupportedCapability, match="does not support insert"):
            infill_tokens(plain, Infill("a", "b"), n_ctx=512, n_batch=512, n_predict=8)


def test_a_cut_prefix_starts_at_the_same_line_while_the_cursor_moves_down(vocab: native.Vocab) -> None:
    """llama-server keeps exactly the last tokens, so the kept prefix starts a little later at every
    keystroke; here it starts at a line the content picks, so the prompt read for the last suggestion
    is (mostly) the start of the next one's, and the prefix cache serves it."""
    words = ["the", "water", "is", "fast", "cache", "model", "run", "local", "token", "value"]
    lines = [f"{i} = {words[i % 10]} {words[(i * 7) % 10]} {words[(i * 3) % 10]}" for i in range(400)]
    pre, suf = _id(vocab, "<|fim_prefix|>"), _id(vocab, "<|fim_suffix|>")
    kept: list[list[int]] = []
    for end in range(150, 400, 3):
        tokens, cut = infill_tokens(vocab, Infill("\n".join(lines[:end]) + "\n", ""), n_ctx=4096, n_predict=8)
        kept.append(tokens[tokens.index(pre) + 1:tokens.index(suf)])
        assert cut > 0 and 768 // 2 - 16 <= len(kept[-1]) <= 768  # half the budget at least, a line's slack
    continued = sum(later[:len(earlier)] == earlier for earlier, later in itertools.pairwise(kept))
    assert continued >= 3 * (len(kept) - 1) // 4, (continued, len(kept) - 1)


def test_a_cut_prefix_is_the_whole_prefixs_own_tokens_from_the_cut_on(vocab: native.Vocab) -> None:
    """So a prompt read before the prefix needed cutting holds them too, in the same tokens, and shifted
    reuse (GenerateRequest.cache_reuse) finds them there; the same text tokenized again from the cut
    could start with other tokens (a line's indentation)."""
    lines = [f"    {w} = the(water, {i})" for i, w in enumerate(["alpha", "beta", "gamma", "delta"] * 100)]
    prefix = "\n".join(lines) + "\n"
    pre, suf = _id(vocab, "<|fim_prefix|>"), _id(vocab, "<|fim_suffix|>")
    tokens, cut = infill_tokens(vocab, Infill(prefix, ""), n_ctx=4096, n_predict=8)
    whole = vocab.tokenize(prefix, add_special=False, parse_special=False)
    assert cut > 0 and tokens[tokens.index(pre) + 1:tokens.index(suf)] == whole[cut:]
