"""The host-RAM tier of the prefix cache: which segment extends a prompt, and what is kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from localrun.engine.host_cache import HostCache

SYSTEM = list(range(100, 140))  # 40 tokens every path starts with


def path(tail: int, n: int = 30) -> list[int]:
    return SYSTEM + [1000 + tail * 100 + k for k in range(n)]


def test_a_segment_that_continues_the_cached_prefix_is_found_and_taken() -> None:
    host = HostCache(1 << 20)
    assert host.put(path(1), len(SYSTEM), bytearray(b"kv1"))
    seg = host.best([*path(1), 7, 8], cached=len(SYSTEM))
    assert seg is not None and seg.start == len(SYSTEM) and seg.end == len(path(1))
    assert len(host) == 0 and host.n_bytes == 0  # taken out: it goes back into the context


def test_no_segment_when_the_prompt_differs_before_it_or_it_adds_nothing() -> None:
    host = HostCache(1 << 20)
    host.put(path(1), len(SYSTEM), bytearray(b"kv1"))
    other_system = [5, *path(1)[1:]]
    assert host.best(other_system, cached=0) is None  # its start is not cached: cannot continue
    assert host.best(other_system, cached=len(SYSTEM)) is None  # prompt differs before the segment
    assert host.best([*SYSTEM, 9, 9], cached=len(SYSTEM)) is None  # diverges at once: adds nothing
    assert len(host) == 1


def test_the_segment_adding_the_most_wins_and_a_partial_match_counts() -> None:
    host = HostCache(1 << 20)
    host.put(path(1, 20), len(SYSTEM), bytearray(b"a"))
    host.put(path(2, 60), len(SYSTEM), bytearray(b"b"))
    prompt = [*path(2, 60)[:-5], 1, 2, 3]  # agrees with the second for all but its last 5 tokens
    seg = host.best(prompt, cached=len(SYSTEM))
    assert seg is not None and seg.state == bytearray(b"b")


def test_a_segment_starting_inside_the_cached_prefix_still_counts() -> None:
    host = HostCache(1 << 20)
    host.put(path(1), len(SYSTEM), bytearray(b"kv"))
    seg = host.best(path(1), cached=len(SYSTEM) + 5)  # the context already holds 5 of its tokens
    assert seg is not None


def test_least_recently_stored_segments_go_first_when_bytes_run_out() -> None:
    host = HostCache(10)
    host.put(path(1), len(SYSTEM), bytearray(4))
    host.put(path(2), len(SYSTEM), bytearray(4))
    host.put(path(3), len(SYSTEM), bytearray(4))  # 12 bytes > 10: the first goes
    assert len(host) == 2 and host.n_bytes == 8
    assert host.best(path(1), cached=len(SYSTEM)) is None
    assert host.best(path(3), cached=len(SYSTEM)) is not None
    assert not host.put(path(4), len(SYSTEM), bytearray(11))  # larger than the whole budget


def test_storing_the_same_segment_again_keeps_one_copy() -> None:
    host = HostCache(1 << 20)
    host.put(path(1), len(SYSTEM), bytearray(b"old"))
    host.put(path(1), len(SYSTEM), bytearray(b"new!"))
    assert len(host) == 1 and host.n_bytes == 4
    seg = host.best(path(1), cached=len(SYSTEM))
    assert seg is not None and seg.state == bytearray(b"new!")


def test_a_prompt_that_agrees_near_the_start_but_not_before_gets_nothing() -> None:
    host = HostCache(1 << 20)
    long_system = list(range(100, 200))
    host.put([*long_system, 7, 8, 9], len(long_system), bytearray(b"kv"))
    other = [5, *long_system[1:], 7, 8, 9]  # the same last 99 tokens before the start: only the first differs
    assert host.best(other, cached=len(long_system)) is None
    assert host.best([*long_system, 7, 8], cached=len(long_system)) is not None


def naive_best(stored: list[tuple[int, list[int], int]], prompt: list[int], cached: int) -> int | None:
    """What best() answers, by comparing every stored (id, path, start): the longest reach, then the oldest."""
    best_id, best_len = None, cached
    for seg_id, seg_path, start in stored:
        if start > cached or seg_path[:start] != prompt[:start]:
            continue
        length = start
        while length < min(len(seg_path), len(prompt)) and seg_path[length] == prompt[length]:
            length += 1
        if length > best_len:
            best_id, best_len = seg_id, length
    return best_id


tokens = st.lists(st.integers(0, 3), min_size=1, max_size=12)


@given(st.lists(st.tuples(tokens, st.integers(0, 11)), max_size=12),
       st.lists(st.tuples(tokens, st.integers(0, 12)), max_size=6))
def test_the_index_finds_what_comparing_every_segment_finds(puts: list[tuple[list[int], int]],
                                                             queries: list[tuple[list[int], int]]) -> None:
    host = HostCache(1 << 20)
    stored: list[tuple[int, list[int], int]] = []
    for n, (seg_path, start) in enumerate(puts):
        if start >= len(seg_path):
            continue
        assert host.put(seg_path, start, bytearray(n.to_bytes(2, "little")))
        stored = [s for s in stored if not (s[2] == start and s[1] == seg_path)] + [(n, seg_path, start)]
    for prompt, cached in queries:
        cached = min(cached, len(prompt))
        expected = naive_best(stored, prompt, cached)
        seg = host.best(prompt, cached)
        assert (None if seg is None else int.from_bytes(seg.state, "little")) == expected
        stored = [s for s in stored if s[0] != expected]
        assert len(host) == len(stored)
