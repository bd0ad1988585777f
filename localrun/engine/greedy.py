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

import math
from collections import deque

import numpy as np

# From this many tokens on, pick() reads the row once instead of checking the raw best first: a pass costs
# more than the array work it could save (Zen 3: 20-150 us a pass at 152k-262k tokens, 3.5 us at 838,
# against ~25 us of array work; in the engine, Gemma 3 270M's sample went 274 -> 252 us a row with one
# pass, the tiny test model's 85 -> 117 us without the check).
ONE_PASS_VOCAB = 65536


class GreedyPenalties:
    def __init__(self, last_n: int, repeat: float, frequency: float, presence: float) -> None:
        self.last_n = last_n
        self.repeat = np.float32(repeat)
        self.frequency = np.float32(frequency)
        self.presence = np.float32(presence)
        self.active = last_n > 0 and not (repeat == 1.0 and frequency == 0.0 and presence == 0.0)
        self.only_lowers = repeat >= 1.0 and frequency >= 0.0 and presence >= 0.0
        self.shifts = frequency != 0.0 or presence != 0.0  # a penalised logit also moves by count x freq + presence
        self._ring: deque[int] = deque()
        self.counts: dict[int, int] = {}
        self._window = np.zeros(max(last_n, 0), dtype=np.intp)  # the ring's tokens as an index array, in slot order
        self._slot = 0  # where the next token goes in _window (the oldest one's slot once it is full)

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
        self._window[self._slot] = token
        self._slot = (self._slot + 1) % self.last_n

    def history(self) -> list[int]:
        """The penalty window's tokens, oldest first."""
        return list(self._ring)

    def pick(self, row: np.ndarray) -> int:
        """The greedy token of the float32 logits ``row`` after penalties (``row`` is left as it was).

        np.argmax returns the first maximum, so the lowest id wins a tie, here as there. Below
        :data:`ONE_PASS_VOCAB` tokens, when penalties only lower logits, the raw best is the answer
        unless it was penalised; then only the counted tokens whose raw logit reaches the best
        uncounted one can still win, and just those are penalised (``_contend``). Otherwise (a vocabulary
        whose pass costs more than the array work, or penalties that may raise a logit) the counted
        tokens' penalised logits are written into the row for one argmax and put back.
        """
        if not self.active or not self.counts:
            return int(row.argmax())  # the method: np.argmax's dispatch costs 2 us more on a small row
        if self.only_lowers and len(row) < ONE_PASS_VOCAB:
            best = int(row.argmax())
            return best if best not in self.counts else self._contend(row)
        ids = np.fromiter(self.counts, dtype=np.int64, count=len(self.counts))
        counts = np.fromiter(self.counts.values(), dtype=np.float32, count=len(self.counts))
        saved = row[ids]
        penalised = np.where(saved <= 0, saved * self.repeat, saved / self.repeat)
        row[ids] = penalised - (counts * self.frequency + np.float32(1.0) * self.presence)
        try:
            return int(row.argmax())
        finally:
            row[ids] = saved

    def _contend(self, row: np.ndarray) -> int:
        """``pick`` when penalties only lower logits and the raw best was penalised: the best
        uncounted token against the counted tokens whose raw logit reaches it (no other can win),
        each penalised with float32 scalars as llama.cpp does. 11 us on an 838-token row with 58
        tokens counted, where writing every penalised logit into the row and back took 37 (Zen 3:
        the tiny test model's every token)."""
        window = self._window[: len(self._ring)]
        rest = row.copy()
        rest[window] = -np.inf
        top = int(rest.argmax())
        floor = rest[top]
        best_value, best_id = (float(floor), top) if top not in self.counts else (-math.inf, len(row))
        for token in set(window[row[window] >= floor].tolist()):
            value = row[token]
            value = value * self.repeat if value <= 0 else value / self.repeat
            if self.shifts:
                value = value - (np.float32(self.counts[token]) * self.frequency + np.float32(1.0) * self.presence)
            if float(value) > best_value or (float(value) == best_value and token < best_id):
                best_value, best_id = float(value), token
        return best_id
