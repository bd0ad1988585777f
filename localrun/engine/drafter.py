"""Draft tokens for speculative decoding, looked up in the sequence's own text (prompt lookup).

Greedy output repeats what came before: code repeats identifiers and whole lines, an answer quotes
its question, a small model loops. When the last ``n`` tokens of a sequence appeared earlier in
its prompt or output, the tokens that followed them then are a good guess for what follows now.
The batcher decodes the guess in the same step as the sequence's next token and keeps the
longest prefix of it that greedy sampling confirms (batcher.py), so a right guess of ``k`` tokens
yields ``k + 1`` tokens for one step, and a wrong one costs only the extra rows of that step.
The output is the same tokens greedy decoding gives without drafts: a draft is only kept where
the model's own argmax agrees with it (llama.cpp's numerics for a row can depend on what else is
in the batch, as they already do under continuous batching; the deterministic mode, whose
kernels do not, decodes without drafts because it cannot free cells out of order).

This is llama.cpp's "prompt lookup" / n-gram speculation (vLLM and SGLang call it ngram):
no draft model, no extra memory beyond one dict per sequence.

:class:`NgramDrafter` indexes, for each length ``m`` in ``[min_n, max_n]``, the position that
followed the latest earlier occurrence of every ``m``-gram, and is extended incrementally as the
sequence grows (O(1) amortised per token). :class:`DraftPolicy` decides whether a sequence
drafts in this step: not after misses (a cool-down that doubles with each fully rejected draft,
so text that does not repeat costs almost nothing). The batcher shares :data:`MAX_DRAFT_ROWS`
between the sequences of a step, fewer when many decode (a batch near the kernels' compute bound
gains less from extra rows).

Owned by the engine thread, one drafter and one policy per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_N = 3          # the longest n-gram looked up first (longer matches predict better)
MIN_N = 2          # the shortest one tried when no longer one matches
MAX_DRAFT = 4      # tokens drafted at most for one sequence in one step
# Draft rows one step may add in all: a decode batch of a few rows costs little more than one row
# (the weights are read once either way), while a batch of 8+ sequences is already near the CPU
# kernels' compute bound, where every extra row costs nearly its full share (BENCHMARKS.md).
MAX_DRAFT_ROWS = 8
MAX_COOLDOWN = 32  # steps without drafting after repeated misses, at most


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
    """How many tokens a sequence drafts: backs off after misses, recovers after hits."""

    cooldown: int = 0   # steps left without drafting
    penalty: int = 1    # the next cool-down after a fully rejected draft (doubles, at most MAX_COOLDOWN)

    def wanted(self) -> int:
        """Draft tokens this sequence wants this step (0 while cooling down); counts the step."""
        if self.cooldown > 0:
            self.cooldown -= 1
            return 0
        return MAX_DRAFT

    def record(self, drafted: int, accepted: int) -> None:
        """The outcome of a step that drafted ``drafted`` tokens, ``accepted`` of them confirmed."""
        if drafted == 0:
            return
        if accepted == 0:
            self.cooldown = self.penalty
            self.penalty = min(self.penalty * 2, MAX_COOLDOWN)
        else:
            self.penalty = 1
