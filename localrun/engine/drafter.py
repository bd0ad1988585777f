"""Draft tokens for speculative decoding, looked up in the sequence's own text (prompt lookup).

Greedy output repeats what came before: code repeats identifiers and whole lines, an answer quotes
its question, a small model loops. When the last ``n`` tokens of a sequence appeared earlier in
its prompt or output, the tokens that followed them then are a good guess for what follows now.
The batcher decodes the guess in the same step as the sequence's next token and keeps the
longest prefix of it that greedy sampling confirms (batcher.py), so a right guess of ``k`` tokens
yields ``k + 1`` tokens for one step, and a wrong one costs only the extra rows of that step.
The output is the same tokens greedy decoding gives without drafts: a draft is only kept where
the model's own argmax agrees with it. llama.cpp's numerics for a row can depend on what else is
in the batch, as they already do under continuous batching: on CPU a lone sequence's rows come
out bit for bit, while CUDA kernels round a multi-row step differently from a one-row one, so
there a near-tie can go the other way (seen on an H200). The deterministic mode, whose kernels
are batch-invariant, decodes without drafts because it cannot free cells out of order.

This is llama.cpp's "prompt lookup" / n-gram speculation (vLLM and SGLang call it ngram):
no draft model, no extra memory beyond one dict per sequence.

:class:`NgramDrafter` indexes, for each length ``m`` in ``[min_n, max_n]``, the position that
followed the latest earlier occurrence of every ``m``-gram, and is extended incrementally as the
sequence grows (O(1) amortised per token). :class:`DraftPolicy` estimates how often a sequence's
drafts are right, and :func:`choose` spends a step's rows on the draft tokens worth their cost:
what one more row costs is measured as the engine runs (stepcost.py), so a machine where a row
costs nearly a whole step drafts little or nothing, and text that does not repeat costs almost
nothing anywhere.

Owned by the engine thread, one drafter and one policy per sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from .stepcost import CostModel

MAX_N = 3          # the longest n-gram looked up first (longer matches predict better)
MIN_N = 2          # the shortest one tried when no longer one matches
MAX_DRAFT = 4      # tokens drafted at most for one sequence in one step
# Draft rows one step may add in all: a decode batch of a few rows costs little more than one row
# (the weights are read once either way), while a batch of 8+ sequences is already near the CPU
# kernels' compute bound, where every extra row costs nearly its full share (BENCHMARKS.md).
MAX_DRAFT_ROWS = 8
# Positions below which rows are drafted to learn their cost before any is known: a row attends every
# cell before it, so a deep one costs several shallow ones (stepcost.py); at 8k a Qwen 0.5B row cost
# about 5x a shallow one on a 2-vCPU Zen 4
EXPLORE_DEPTH = 2048
DECAY = 0.8        # weight of a sequence's earlier draft outcomes at each new one
RECOVER = 0.02     # how far a sequence that did not draft moves back towards the prior, per step


class NgramDrafter:
    """Proposes the continuation of the latest earlier occurrence of the sequence's last tokens."""

    __slots__ = ("_index", "_indexed")

    def __init__(self) -> None:
        # m -> (m-gram -> position right after its latest indexed occurrence)
        self._index: dict[int, dict[tuple[int, ...], int]] = {m: {} for m in range(MIN_N, MAX_N + 1)}
        self._indexed = 0  # n-grams ending before this position are in the index

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens that followed the last earlier occurrence of ``tokens``' longest
        matching tail (``MAX_N`` down to ``MIN_N`` tokens); ``[]`` when none occurred before."""
        end = len(tokens)
        if k <= 0 or end <= MIN_N:
            return []
        self._extend(tokens, end - 1)  # occurrences that end before the tail itself
        for m in range(MAX_N, MIN_N - 1, -1):
            if end < m:
                continue
            start = self._index[m].get(tuple(tokens[end - m:]))
            if start is not None:
                return tokens[start: start + k]
        return []

    def _extend(self, tokens: list[int], upto: int) -> None:
        """Index every n-gram ending at a position ``<= upto`` (exclusive end ``<= upto``)."""
        for stop in range(self._indexed + 1, upto + 1):
            for m, index in self._index.items():
                if stop >= m:
                    index[tuple(tokens[stop - m: stop])] = stop
        self._indexed = max(self._indexed, upto)


@dataclass(slots=True)
class DraftPolicy:
    """How often a sequence's drafts are right: the chance that its next draft token is confirmed,
    given the one before was (decayed counts, starting from one hit in two tries)."""

    hits: float = 1.0
    tries: float = 2.0

    @property
    def accept_rate(self) -> float:
        return self.hits / self.tries

    def record(self, drafted: int, accepted: int) -> None:
        """A step drafted ``drafted`` tokens and ``accepted`` of them were confirmed: each confirmed
        one is a hit, and the first contradicted one (if any) a miss."""
        if drafted == 0:
            return
        tested = accepted + (accepted < drafted)
        self.hits = self.hits * DECAY + accepted
        self.tries = self.tries * DECAY + tested

    def skipped(self) -> None:
        """A step in which this sequence did not draft: its estimate drifts back towards the prior,
        so a sequence whose text starts repeating gets tried again."""
        self.hits += RECOVER * (1.0 - self.hits)
        self.tries += RECOVER * (2.0 - self.tries)


class Offer(NamedTuple):
    """A sequence's draft for this step: ``tokens`` proposed, its ``rate`` of acceptance
    (:class:`DraftPolicy`), and ``position``, where its decode row sits (its first draft row is one
    deeper)."""

    tokens: int
    rate: float
    position: int


def choose(offers: list[Offer], rows: int, cells: int, cost: CostModel | None, room: int, *,
           explore: bool = False) -> list[int]:
    """How many of each offered draft to decode this step: ``rows`` decode rows attending ``cells``
    KV cells are in the step already; ``room`` rows at most may be added. Returns the count per offer.

    A draft token ``j`` (1-based) of a sequence that accepts with rate ``p`` yields ``p**j`` tokens
    on average and costs a row at its position (``cost.row``: the deeper, the dearer). Rows are
    added best yield per second first while a row yields more than the step's current rate (tokens
    per second) would buy with the row's time: then adding it raises tokens per second. Offers
    deeper than the rows the model was fitted on are not drafted (``cost.covers``): their cost is
    not known yet.

    Learning the cost: with no model yet (too few pure decode steps of different sizes), up to
    :data:`MAX_DRAFT_ROWS` rows are drafted for offers no deeper than :data:`EXPLORE_DEPTH`, where
    a row is cheap to try anywhere; ``explore`` (now and then, at any depth) drafts one row for the
    likeliest offer, which keeps the slope measured where the model would not draft.
    """
    counts = [0] * len(offers)
    if explore:
        best = max(range(len(offers)), key=lambda i: offers[i].rate, default=None)
        if best is not None and room > 0 and offers[best].tokens > 0:
            counts[best] = 1
        return counts
    if cost is None:
        left = min(room, MAX_DRAFT_ROWS - (rows - 1))
        for i, offer in enumerate(offers):
            if offer.position < EXPLORE_DEPTH:
                counts[i] = max(0, min(offer.tokens, left))
                left -= counts[i]
        return counts
    candidates = []
    for i, offer in enumerate(offers):
        if cost.covers(offer.position):
            for j in range(1, offer.tokens + 1):
                gain, seconds = offer.rate ** j, cost.row(offer.position + j)
                candidates.append((gain / seconds if seconds > 0 else math.inf, gain, seconds, i))
    candidates.sort(reverse=True)
    tokens, seconds = float(rows), cost.seconds(rows, cells)
    for _, gain, row_seconds, i in candidates[:max(room, 0)]:
        if gain * seconds <= row_seconds * tokens:
            break
        counts[i] += 1
        tokens += gain
        seconds += row_seconds
    return counts
