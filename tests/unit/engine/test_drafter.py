"""The n-gram drafter against a naive search; how many draft rows a step spends; the step cost model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localrun.engine.drafter import EXPLORE_DEPTH, MAX_DRAFT, MAX_N, MIN_N, DraftPolicy, NgramDrafter, Offer, choose
from localrun.engine.stepcost import CostModel, StepCost, attended


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


def shallow(tokens: int, rate: float) -> Offer:
    return Offer(tokens, rate, 100)


def test_choose_without_a_cost_model_drafts_shallow_rows_to_learn_it() -> None:
    offers = [shallow(4, 0.1), shallow(4, 0.9)]
    assert choose(offers, rows=2, cells=202, cost=None, room=100) == [4, 3]  # MAX_DRAFT_ROWS - 1 rows
    assert choose([shallow(4, 0.5)], rows=1, cells=101, cost=None, room=2) == [2]  # the free cells bound it
    deep = Offer(4, 0.9, EXPLORE_DEPTH)
    assert choose([deep, shallow(4, 0.5)], rows=2, cells=2200, cost=None, room=100) == [0, 4]


def test_exploring_drafts_one_row_for_the_likeliest_offer_at_any_depth() -> None:
    compute_bound = CostModel(fixed=0.004, per_row=0.036)
    offers = [Offer(4, 0.3, 16000), Offer(4, 0.6, 16000)]
    assert choose(offers, rows=2, cells=32002, cost=compute_bound, room=100, explore=True) == [0, 1]
    assert choose(offers, rows=2, cells=32002, cost=None, room=0, explore=True) == [0, 0]


def test_choose_drafts_where_rows_are_cheap_and_not_where_they_cost_a_step() -> None:
    memory_bound = CostModel(fixed=0.0176, per_row=0.0044)   # Zen 5: 22 ms for one row, 53 for eight
    compute_bound = CostModel(fixed=0.004, per_row=0.036)    # Zen 3: 40 ms for one row, 225 for eight
    assert choose([shallow(4, 0.9)], rows=1, cells=101, cost=memory_bound, room=100) == [4]
    assert choose([shallow(4, 0.4)], rows=1, cells=101, cost=memory_bound, room=100) == [1]
    assert choose([shallow(4, 0.05)], rows=1, cells=101, cost=memory_bound, room=100) == [0]
    assert choose([shallow(4, 0.9)], rows=1, cells=101, cost=compute_bound, room=100) == [0]
    assert choose([shallow(4, 0.9), shallow(4, 0.6)], rows=2, cells=202, cost=memory_bound, room=100) == [4, 1]
    assert choose([shallow(4, 0.9), shallow(4, 0.3)], rows=2, cells=202, cost=memory_bound, room=100) == [4, 0]
    assert choose([shallow(4, 0.9)], rows=1, cells=101, cost=memory_bound, room=2) == [2]


def test_a_deep_row_is_priced_with_its_attention() -> None:
    """Zen 4, Qwen 0.5B: a row's weights cost ~11 ms and its attention ~5 us a cell (40 ms at 8k)."""
    zen4 = CostModel(fixed=0.002, per_row=0.011, per_cell=5e-6, depth=32768)
    assert choose([shallow(4, 0.9)], rows=1, cells=101, cost=zen4, room=100) == [1]
    assert choose([Offer(4, 0.9, 8192)], rows=1, cells=8193, cost=zen4, room=100) == [0]
    # two sequences: the shallow one's rows go first, the deep one's are not worth theirs
    assert choose([Offer(4, 0.9, 8192), shallow(4, 0.9)], rows=2, cells=8294, cost=zen4, room=100) == [0, 4]


def test_rows_deeper_than_the_model_knows_are_not_drafted() -> None:
    cheap = CostModel(fixed=0.02, per_row=0.001, per_cell=0.0, depth=4096)
    assert choose([Offer(4, 0.9, 4000)], rows=1, cells=4001, cost=cheap, room=100) == [4]
    assert choose([Offer(4, 0.9, 4096)], rows=1, cells=4097, cost=cheap, room=100) == [0]


@given(st.lists(st.tuples(st.integers(0, MAX_DRAFT), st.floats(0.0, 0.999), st.integers(0, 40000)), max_size=8),
       st.integers(1, 16), st.floats(0.0, 0.05), st.floats(0.0, 0.05), st.floats(0.0, 1e-5), st.integers(0, 40))
def test_choose_never_lowers_the_expected_rate(offers: list[tuple[int, float, int]], rows: int, fixed: float,
                                               per_row: float, per_cell: float, room: int) -> None:
    cost = CostModel(fixed + 1e-4, per_row, per_cell)
    drafts = [Offer(*o) for o in offers]
    cells = sum(o.position + 1 for o in drafts) + (rows - len(drafts)) * 100
    counts = choose(drafts, rows, cells, cost, room)
    assert all(0 <= c <= o.tokens for c, o in zip(counts, drafts, strict=True))
    assert sum(counts) <= room
    gained = sum(o.rate ** j for c, o in zip(counts, drafts, strict=True) for j in range(1, c + 1))
    spent = sum(cost.row(o.position + j) for c, o in zip(counts, drafts, strict=True) for j in range(1, c + 1))
    before = cost.seconds(rows, cells)
    assert (rows + gained) / (before + spent) >= rows / before - 1e-12


def test_step_cost_fits_a_line_once_two_row_counts_are_known() -> None:
    cost = StepCost()
    cost.record(1, 101, 0.5)  # the first step of a size (graph build, cold kernels) is left out
    for _ in range(5):
        cost.record(1, 101, 0.022)
    assert cost.model() is None  # one row count: no slope yet
    cost.record(8, attended(100, 8), 0.5)
    for _ in range(2):
        cost.record(8, attended(100, 8), 0.053)
    assert cost.model() is None  # too few samples of the second (its first is left out)
    cost.record(8, attended(100, 8), 0.053)
    model = cost.model()
    assert model is not None
    assert model.per_row == pytest.approx(0.031 / 7)
    assert model.seconds(1) == pytest.approx(0.022)
    assert model.covers(127) and not model.covers(128)  # fitted on rows at positions 100-107
    cost.record(0, 0, 1.0)
    cost.record(500, 50000, 1.0)  # outside the tracked range: ignored
    assert cost.model() == model


def test_step_cost_separates_the_attention_once_depths_differ() -> None:
    def seconds(rows: int, position: int) -> float:
        return 0.002 + 0.011 * rows + 5e-6 * attended(position, rows)

    cost = StepCost()
    for position in (100, 8192):
        for rows in (1, 2, 5):
            for _ in range(4):
                cost.record(rows, attended(position, rows), seconds(rows, position))
    model = cost.model()
    assert model is not None
    assert model.per_row == pytest.approx(0.011) and model.per_cell == pytest.approx(5e-6)
    assert model.row(8192) == pytest.approx(seconds(2, 8192) - seconds(1, 8192), rel=1e-3)


def test_one_depth_prices_its_rows_whole() -> None:
    """One stream at one depth: cells follow the rows, so a row costs what it cost there."""
    cost = StepCost()
    for rows in (1, 5):
        for _ in range(4):
            cost.record(rows, attended(8192, rows), 0.002 + 0.051 * rows)
    model = cost.model()
    assert model is not None and model.per_cell == 0.0
    assert model.row(8192) == pytest.approx(0.051)
    assert model.covers(16383) and not model.covers(16384)


def test_step_cost_never_goes_negative() -> None:
    cost = StepCost()
    for _ in range(4):
        cost.record(1, 101, 0.05)
        cost.record(4, attended(100, 4), 0.01)  # noise: a bigger step measured faster
    model = cost.model()
    assert model is not None and model.per_row == 0.0 and model.fixed >= 0.0


def test_prompt_steps_are_timed_per_size_class_after_the_first() -> None:
    cost = StepCost()
    cost.record_prompt(61, 0.5)  # the first of its class builds the graph: left out
    assert cost.prompt_seconds(61) is None
    cost.record_prompt(40, 0.002)
    assert cost.prompt_seconds(61) == pytest.approx(0.002)  # 32-63 rows: one class
    cost.record_prompt(50, 0.004)
    assert 0.002 < (cost.prompt_seconds(33) or 0) < 0.004  # the mean moves towards the latest
    assert cost.prompt_seconds(64) is None and cost.prompt_seconds(31) is None and cost.prompt_seconds(0) is None
