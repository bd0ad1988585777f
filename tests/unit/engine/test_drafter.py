"""The n-gram drafter against a naive search; how many draft rows a step spends; the step cost model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localrun.engine.drafter import MAX_DRAFT, MAX_N, MIN_N, DraftPolicy, NgramDrafter, choose
from localrun.engine.stepcost import CostModel, StepCost


def naive(tokens: list[int], k: int) -> list[int]:
    """The continuation of the latest earlier occurrence of the longest tail, by brute force."""
    end = len(tokens)
    for m in range(MAX_N, MIN_N - 1, -1):
        if end <= m:
            continue
        tail = tokens[end - m:]
        for start in range(end - 1, m - 1, -1):  # start: the position after an occurrence
            if start < end and tokens[start - m: start] == tail:
                return tokens[start: start + k]
    return []


def test_proposes_what_followed_the_last_occurrence() -> None:
    drafter = NgramDrafter()
    tokens = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3]
    assert drafter.propose(tokens, 3) == [4, 5, 9]
    assert drafter.propose(tokens, 1) == [4]
    assert drafter.propose([7, 8, 9], 4) == []  # a fresh drafter: nothing repeats
    assert drafter.propose(tokens, 0) == []


def test_prefers_the_longest_match_and_the_latest_occurrence() -> None:
    tokens = [5, 2, 3, 7, 1, 2, 3, 8, 2, 3]
    # the 3-gram (x, 2, 3) never repeats the tail (8, 2, 3); the 2-gram (2, 3) last occurred before 8
    assert NgramDrafter().propose(tokens, 2) == [8, 2]
    tokens = [1, 2, 3, 6, 4, 2, 3, 9, 1, 2, 3]
    assert NgramDrafter().propose(tokens, 1) == [6]  # the 3-gram (1, 2, 3) wins over the later (2, 3)


@given(st.lists(st.integers(0, 4), min_size=0, max_size=60), st.integers(0, 6))
def test_matches_a_naive_search_as_the_sequence_grows(tokens: list[int], k: int) -> None:
    drafter = NgramDrafter()
    for end in range(len(tokens) + 1):  # one drafter, extended step by step as the batcher uses it
        assert drafter.propose(tokens[:end], k) == naive(tokens[:end], k)


def test_accept_rate_follows_outcomes_and_drifts_back_when_idle() -> None:
    policy = DraftPolicy()
    assert policy.accept_rate == 0.5
    for _ in range(10):
        policy.record(4, 4)  # every draft confirmed whole: hits only
    assert policy.accept_rate > 0.9
    for _ in range(30):
        policy.record(4, 0)  # every draft contradicted at once: one miss each
    assert policy.accept_rate < 0.2
    low = policy.accept_rate
    for _ in range(200):
        policy.skipped()
    assert low < policy.accept_rate <= 0.5 + 1e-9
    policy.record(0, 0)  # nothing drafted: nothing learned


def test_choose_without_a_cost_model_drafts_to_learn_it() -> None:
    assert choose([(4, 0.1), (4, 0.9)], rows=2, cost=None, room=100) == [4, 3]  # MAX_DRAFT_ROWS - 1 rows
    assert choose([(4, 0.5)], rows=1, cost=None, room=2) == [2]                 # the free cells bound it


def test_choose_drafts_where_rows_are_cheap_and_not_where_they_cost_a_step() -> None:
    memory_bound = CostModel(fixed=0.0176, per_row=0.0044)   # Zen 5: 22 ms for one row, 53 for eight
    compute_bound = CostModel(fixed=0.004, per_row=0.036)    # Zen 3: 40 ms for one row, 225 for eight
    assert choose([(4, 0.9)], rows=1, cost=memory_bound, room=100) == [4]
    assert choose([(4, 0.4)], rows=1, cost=memory_bound, room=100) == [1]
    assert choose([(4, 0.05)], rows=1, cost=memory_bound, room=100) == [0]
    assert choose([(4, 0.9)], rows=1, cost=compute_bound, room=100) == [0]
    assert choose([(4, 0.9), (4, 0.6)], rows=2, cost=memory_bound, room=100) == [4, 1]  # best rows first
    assert choose([(4, 0.9), (4, 0.3)], rows=2, cost=memory_bound, room=100) == [4, 0]
    assert choose([(4, 0.9)], rows=1, cost=memory_bound, room=2) == [2]


@given(st.lists(st.tuples(st.integers(0, MAX_DRAFT), st.floats(0.0, 0.999)), max_size=8),
       st.integers(1, 16), st.floats(0.0, 0.05), st.floats(0.0, 0.05), st.integers(0, 40))
def test_choose_never_lowers_the_expected_rate(offers: list[tuple[int, float]], rows: int, fixed: float,
                                               per_row: float, room: int) -> None:
    cost = CostModel(fixed + 1e-4, per_row)
    counts = choose(offers, rows, cost, room)
    assert all(0 <= c <= offered for c, (offered, _) in zip(counts, offers, strict=True))
    assert sum(counts) <= room
    gained = sum(rate ** j for c, (_, rate) in zip(counts, offers, strict=True) for j in range(1, c + 1))
    assert (rows + gained) / cost.seconds(rows + sum(counts)) >= rows / cost.seconds(rows) - 1e-12


def test_step_cost_fits_a_line_once_two_row_counts_are_known() -> None:
    cost = StepCost()
    cost.record(1, 0.5)  # the first step of a size (graph build, cold kernels) is left out
    for _ in range(5):
        cost.record(1, 0.022)
    assert cost.model() is None  # one row count: no slope yet
    for _ in range(3):
        cost.record(8, 0.053)
    assert cost.model() is None  # too few samples of the second (its first is left out)
    cost.record(8, 0.053)
    model = cost.model()
    assert model is not None
    assert model.per_row == pytest.approx(0.031 / 7)
    assert model.seconds(1) == pytest.approx(0.022)
    cost.record(0, 1.0)
    cost.record(500, 1.0)  # outside the tracked range: ignored
    assert cost.model() == model


def test_step_cost_never_goes_negative() -> None:
    cost = StepCost()
    for _ in range(4):
        cost.record(1, 0.05)
        cost.record(4, 0.01)  # noise: a bigger step measured faster
    model = cost.model()
    assert model is not None and model.per_row == 0.0 and model.fixed >= 0.0
