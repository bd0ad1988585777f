"""Greedy decoding with llama.cpp's penalties, without copying the vocabulary.

A llama_sampler chain starts every sample by copying all logits into a token-data array: for
Gemma's 262,144 tokens that is most of the ~0.6 ms a greedy sample cost, paid for every sequence
at every step (at 8 streams, 8% of a decode step). Greedy needs only the best token after the
penalties, and penalties (repeat_penalty, frequency, presence over the last ``last_n`` tokens) can
touch at most ``last_n`` distinct tokens. So :meth:`GreedyPenalties.pick` writes those tokens'
penalised logits into the row, computed exactly as ``llama_sampler_penalties_apply`` does (float32:
multiply a non-positive logit by the penalty, divide a positive one, then subtract count x frequency
+ presence), takes one argmax and puts the row back.
:meth:`accept` keeps the history as ``llama_sampler_penalties_accept`` does (a ring of the last
``last_n`` tokens and their counts). Same token as the chain top_k -> penalties -> greedy, except
for exact ties between logits, where the lowest token id wins here.

Owned by the engine thread, one per sequence.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class GreedyPenalties:
    def __init__(self, last_n: int, repeat: float, frequency: float, presence: float) -> None:
        self.last_n = last_n
        self.repeat = np.float32(repeat)
        self.frequency = np.float32(frequency)
        self.presence = np.float32(presence)
        self.active = last_n > 0 and not (repeat == 1.0 and frequency == 0.0 and presence == 0.0)
        self.only_lowers = repeat >= 1.0 and frequency >= 0.0 and presence >= 0.0
        self._ring: deque[int] = deque()
        self.counts: dict[int, int] = {}

    def accept(self, token: int) -> None:
        """Record ``token`` (a prompt token or a sampled one) in the penalty window."""
        if self.last_n <= 0:
            return
        self.counts[token] = self.counts.get(token, 0) + 1
        if len(self._ring) >= self.last_n:
            old = self._ring.popleft()
            self.counts[old] -= 1
            if self.counts[old] == 0:
                del self.counts[old]
        self._ring.append(token)

    def history(self) -> list[int]:
        """The penalty window's tokens, oldest first."""
        return list(self._ring)

    def pick(self, row: np.ndarray) -> int:
        """The greedy token of the float32 logits ``row`` after penalties (``row`` is left as it was).

        One pass over the row whatever the history holds: the counted tokens' logits are replaced by
        their penalised values for the argmax and put back (with a large vocabulary the pass is the
        cost: Gemma's 262,144 logits are 1 MiB a row, read once instead of twice when the best raw
        token had been penalised). np.argmax returns the first maximum: the lowest id wins a tie.
        """
        if not self.active or not self.counts:
            return int(np.argmax(row))
        ids = np.fromiter(self.counts, dtype=np.int64, count=len(self.counts))
        counts = np.fromiter(self.counts.values(), dtype=np.float32, count=len(self.counts))
        saved = row[ids]
        penalised = np.where(saved <= 0, saved * self.repeat, saved / self.repeat)
        row[ids] = penalised - (counts * self.frequency + np.float32(1.0) * self.presence)
        try:
            return int(np.argmax(row))
        finally:
            row[ids] = saved
