"""The scan that finds what a prompt can reuse, shifted, from a cached one (llama-server's --cache-reuse)."""

from __future__ import annotations

import pytest

from localrun.engine.kvcache import shifted_runs


def test_a_block_cut_from_the_middle_leaves_one_run_to_reuse() -> None:
    head, block, tail = [1, 2, 3], list(range(100, 110)), list(range(200, 230))
    assert shifted_runs(head + block + tail + [9], head + tail + [5], 3, 8) == [(13, 3, 30)]


def test_runs_shorter_than_asked_are_read_again_and_the_scan_goes_on_past_them() -> None:
    cached = [0, 7, 8, 9, 50, *range(10, 30)]
    prompt = [0, 7, 8, 9, *range(10, 30)]  # [7, 8, 9] is the common prefix already
    assert shifted_runs(cached, prompt, 4, 5) == [(5, 4, 20)]
    short = [0, 60, 61, 62, 63, *range(10, 20)]
    assert shifted_runs([0, 61, 62, 5, *range(10, 20)], short, 1, 3) == []  # 61, 62 then a difference


def test_several_runs_follow_each_other_in_the_prompt() -> None:
    a, b = list(range(100, 120)), list(range(300, 320))
    cached = [0, 5, 5, *a, 6, *b]
    assert shifted_runs(cached, [0, *a, *b, 1], 1, 10) == [(3, 1, 20), (24, 21, 20)]


@pytest.mark.timeout(60)
def test_a_prompt_of_one_repeated_token_stops_the_scan_at_its_limit() -> None:
    """Every start in a run of 255 equal tokens matches up to 255 of a prompt of that token: without
    the limit, 30k starts x ~128 comparisons each."""
    cached, prompt = ([3] * 255 + [4]) * 120, [9] + [3] * 30_000
    assert shifted_runs(cached, prompt, 1, 256) == []
