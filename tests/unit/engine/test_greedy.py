"""Greedy with penalties without the vocabulary copy: the same token as llama.cpp's chain."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from localrun.engine.greedy import ONE_PASS_VOCAB, GreedyPenalties


def oracle(row: np.ndarray, history: list[int], last_n: int, repeat: float, freq: float, present: float) -> int:
    """top_k -> penalties -> greedy as llama.cpp computes it: penalise every token in the window
    (float32), then the first best (lowest id among exact ties)."""
    logits = row.astype(np.float32).copy()
    window = history[-last_n:] if last_n > 0 else []
    if last_n > 0 and not (repeat == 1.0 and freq == 0.0 and present == 0.0):
        for token in set(window):
            count = np.float32(window.count(token))
            v = logits[token]
            v = v * np.float32(repeat) if v <= 0 else v / np.float32(repeat)
            logits[token] = v - (count * np.float32(freq) + np.float32(1.0) * np.float32(present))
    return int(np.argmax(logits))


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    vocab=st.one_of(st.integers(2, 300), st.integers(ONE_PASS_VOCAB, ONE_PASS_VOCAB + 300)),  # both ways
    history_len=st.integers(0, 80),
    last_n=st.integers(0, 64),
    repeat=st.sampled_from([1.0, 1.1, 1.5, 0.9]),
    freq=st.sampled_from([0.0, 0.5, -0.5]),
    present=st.sampled_from([0.0, 0.3, -0.3]),
)
def test_the_same_token_as_the_native_penalties_then_greedy(seed: int, vocab: int, history_len: int, last_n: int,
                                                           repeat: float, freq: float, present: float) -> None:
    rng = np.random.default_rng(seed)
    row = rng.normal(0, 2, vocab).astype(np.float32)
    row[rng.integers(0, vocab, 3)] = -np.inf  # masked end-of-generation tokens
    history = [int(t) for t in rng.integers(0, min(vocab, 12), history_len)]  # few distinct: repeats
    greedy = GreedyPenalties(last_n, repeat, freq, present)
    for token in history:
        greedy.accept(token)
    before = row.copy()
    assert greedy.pick(row) == oracle(row, history, last_n, repeat, freq, present)
    assert np.array_equal(row, before)  # the context's logits row is left as it was (logprobs read it)


def test_the_window_forgets_the_oldest_token() -> None:
    greedy = GreedyPenalties(2, 2.0, 0.0, 0.0)
    for token in (0, 1, 1):
        greedy.accept(token)
    assert greedy.counts == {1: 2}
    row = np.array([1.0, 1.5, 0.0], dtype=np.float32)
    assert greedy.pick(row) == 0  # token 1 is penalised (0.75), token 0 no longer is


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    vocab=st.integers(2, 40),
    history_len=st.integers(1, 80),
    last_n=st.integers(1, 64),
    repeat=st.sampled_from([1.0, 2.0, 4.0]),
    freq=st.sampled_from([0.0, 0.5]),
    present=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_exact_ties_go_to_the_lowest_id_as_there(seed: int, vocab: int, history_len: int, last_n: int,
                                                 repeat: float, freq: float, present: float) -> None:
    """Logits from a few exact values, penalties that map one onto another (2 / 2 = 1, 1.5 - 0.5 =
    1): every tie between a penalised and an unpenalised token is decided as llama.cpp decides it."""
    rng = np.random.default_rng(seed)
    row = rng.choice(np.array([-np.inf, -1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 4.0], dtype=np.float32), vocab)
    history = [int(t) for t in rng.integers(0, vocab, history_len)]
    greedy = GreedyPenalties(last_n, repeat, freq, present)
    for token in history:
        greedy.accept(token)
    assert greedy.pick(row) == oracle(row, history, last_n, repeat, freq, present)
