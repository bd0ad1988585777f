"""Prompts of a fixed token length, built with the target's own tokenizer where it has one.

A prompt is a sequence of common English words separated by spaces. With a tokenizer endpoint the
builder keeps the words that are one token each and checks that they add up (no merges across
words), so a prompt of ``n`` tokens is ``n - overhead`` words, where ``overhead`` is what the
tokenizer adds on its own (BOS). A sample of built prompts is counted again; any mismatch makes
the lengths "approximate" in the report, never silently exact. Without a tokenizer the builder
assumes one token per word plus one BOS and says so.

Every prompt begins differently (its first words spell its index), so a server's prefix cache can
reuse nothing across prompts except the shared prefix asked for with ``--shared-prefix``.

Known tokenizer endpoints, tried in order: localrun ``POST /api/tokenize``, llama-cpp-python's
server ``POST /extras/tokenize``, llama.cpp's server ``POST /tokenize``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from ..jsontypes import JSONObject

log = logging.getLogger(__name__)

CountFn = Callable[[str], Awaitable[int]]

WORDS = ["the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part"]  # noqa: E501
MIN_WORDS = 16  # fewer single-token words than this and prompts would repeat too much


@dataclass(frozen=True, slots=True)
class TokenizerInfo:
    """How prompt lengths were obtained, for the report."""

    endpoint: str | None  # e.g. "/extras/tokenize", None when the target exposes none
    exact: bool
    note: str

    def as_dict(self) -> JSONObject:
        return {"endpoint": self.endpoint, "exact": self.exact, "note": self.note}


def _tokens_from(body: object) -> int | None:
    if isinstance(body, dict):
        if isinstance(body.get("count"), int):
            return int(body["count"])
        tokens = body.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
    return None


async def find_tokenizer(
    client: httpx.AsyncClient, base_url: str, model: str | None, headers: dict[str, str]
) -> tuple[str, CountFn] | None:
    """The first tokenizer endpoint of the server at ``base_url`` that answers, as (path, count).

    ``model`` is sent where the endpoint takes one; None leaves it to the server's default model.
    """
    named = {"model": model} if model else {}
    shapes: list[tuple[str, Callable[[str], JSONObject]]] = [
        ("/api/tokenize", lambda text: {**named, "content": text}),
        ("/extras/tokenize", lambda text: {**named, "input": text}),
        ("/tokenize", lambda text: {"content": text, "add_special": True}),
    ]
    for path, make in shapes:
        url = base_url + path

        async def count(text: str, url: str = url, make: Callable[[str], JSONObject] = make) -> int:
            resp = await client.post(url, json=make(text), headers=headers, timeout=30)
            resp.raise_for_status()
            n = _tokens_from(resp.json())
            if n is None:
                raise ValueError(f"{url} answered without a token list")
            return n

        try:
            await count("hello world")
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("no tokenizer at %s: %s", url, exc)
            continue
        return path, count
    return None


class PromptBuilder:
    """Builds the ``index``-th prompt: ``shared_prefix`` tokens common to all, then ``unique`` more.

    Lengths count what the target's tokenizer counts for the whole prompt (its BOS included,
    and it belongs to the shared part). Pure and deterministic for a given seed.
    """

    def __init__(self, words: list[str], overhead: int, seed: int = 0) -> None:
        if len(words) < MIN_WORDS:
            raise ValueError(f"need at least {MIN_WORDS} words, got {len(words)}")
        self.words = list(words)
        self.overhead = overhead
        self.seed = seed

    def _filler(self, rng: random.Random, n: int) -> list[str]:
        return [rng.choice(self.words) for _ in range(max(0, n))]

    def _head(self, index: int) -> list[str]:
        """Three words that spell ``index`` in base len(words): distinct prompts start differently."""
        base = len(self.words)
        return [self.words[(index // base**k) % base] for k in (2, 1, 0)]

    def prefix(self, shared_prefix: int) -> str:
        if shared_prefix <= 0:
            return ""
        rng = random.Random(f"{self.seed}:prefix")
        return " ".join(self._filler(rng, shared_prefix - self.overhead))

    def prompt(self, index: int, unique: int, shared_prefix: int = 0) -> str:
        """The prompt for request ``index``: ``shared_prefix + unique`` tokens in all."""
        rng = random.Random(f"{self.seed}:{index}")
        n_unique = unique if shared_prefix > 0 else unique - self.overhead
        head = self._head(index)[: max(0, n_unique)]
        body = head + self._filler(rng, n_unique - len(head))
        prefix = self.prefix(shared_prefix)
        return f"{prefix} {' '.join(body)}" if prefix else " ".join(body)


async def calibrate(
    count: CountFn | None, endpoint: str | None, seed: int, sample: Callable[[PromptBuilder], list[tuple[str, int]]]
) -> tuple[PromptBuilder, TokenizerInfo]:
    """Choose words and overhead with the tokenizer ``count`` and verify on ``sample(builder)``.

    ``sample`` returns (prompt, expected token count) pairs to check. Without a tokenizer the
    builder assumes one token per word and a BOS, and reports the lengths as approximate.
    """
    if count is None:
        note = "approximate: the target exposes no tokenizer; assumed one token per word plus BOS"
        return PromptBuilder(list(WORDS), overhead=1, seed=seed), TokenizerInfo(None, False, note)
    try:
        overhead = await count("")
    except Exception:  # some tokenizers refuse empty input: derive it from one word
        overhead = await count("the") - 1
    words = list(WORDS)
    if await count(" ".join(words)) - overhead != len(words):
        words = [w for w in WORDS if await count(w) - overhead == 1]
    if len(words) < MIN_WORDS:
        note = f"approximate: only {len(words)} common words are single tokens for this model"
        return PromptBuilder(list(WORDS), overhead, seed), TokenizerInfo(endpoint, False, note)
    builder = PromptBuilder(words, overhead, seed)
    checks = sample(builder)
    worst = 0
    for text, expected in checks:
        worst = max(worst, abs(await count(text) - expected))
    if worst:
        note = f"approximate: built with {endpoint}, off by up to {worst} tokens in {len(checks)} checked prompts"
        return builder, TokenizerInfo(endpoint, False, note)
    return builder, TokenizerInfo(endpoint, True, f"exact: built with {endpoint}, {len(checks)} prompts verified")
