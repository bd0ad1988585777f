"""The n-gram drafter against a naive search, and the draft policy's back-off."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from localrun.engine.drafter import MAX_COOLDOWN, MAX_DRAFT, MAX_N, MIN_N, DraftPolicy, NgramDrafter


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


def test_policy_backs_off_after_misses_and_recovers_after_a_hit() -> None:
    policy = DraftPolicy()
    assert policy.wanted() == MAX_DRAFT
    policy.record(4, 0)  # a miss: one step off
    assert [policy.wanted() for _ in range(2)] == [0, MAX_DRAFT]
    policy.record(4, 0)  # a second miss in a row: two steps off
    assert [policy.wanted() for _ in range(3)] == [0, 0, MAX_DRAFT]
    policy.record(4, 2)  # a hit resets the back-off
    policy.record(4, 0)
    assert [policy.wanted() for _ in range(2)] == [0, MAX_DRAFT]
    for _ in range(20):
        policy.record(4, 0)
    assert policy.cooldown <= MAX_COOLDOWN
    policy.record(0, 0)  # a step that drafted nothing changes nothing
    assert policy.cooldown <= MAX_COOLDOWN
