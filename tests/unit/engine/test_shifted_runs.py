"""The scan that finds what a prompt can reuse, shifted, from a cached one (llama-server's --cache-reuse)."""

from __future__ import annotations

import pytest

from localrun.engine.kvcache import MAX_GAPPED, gapped_runs, prompt_grams, reusable_runs, shifted_runs


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


def test_new_text_in_place_of_a_block_leaves_the_run_after_it_to_reuse() -> None:
    """llama-server's scan stops at the first new token; the gapped scan reads past it."""
    head, old, new, tail = [1, 2, 3], list(range(100, 110)), list(range(500, 507)), list(range(200, 260))
    cached, prompt = head + old + tail + [9], head + new + tail + [5]
    assert shifted_runs(cached, prompt, 3, 32) == []
    assert gapped_runs(cached, prompt, 3, 3, 32) == [(13, 10, 60)]
    assert reusable_runs(cached, prompt, 3, 32) == [(13, 10, 60)]


def test_gapped_runs_go_forward_in_both_and_skip_short_ones() -> None:
    a, b, c = list(range(100, 140)), list(range(300, 340)), list(range(600, 605))
    cached = [0, *a, 7, *c, 8, *b]
    prompt = [0, 50, *a, 51, *c, 52, *b, 53]
    assert gapped_runs(cached, prompt, 1, 1, 20) == [(1, 2, 40), (48, 49, 40)]  # c: shorter than 20
    assert gapped_runs(cached, [0, 50, *b, 51, *a], 1, 1, 20) == [(48, 2, 40)]  # a is behind b in cached


def test_a_deleted_block_then_new_text_takes_both_kinds_of_run() -> None:
    head, block, a, new, b = [1, 2], list(range(100, 110)), list(range(200, 240)), [900, 901], list(range(300, 340))
    cached, prompt = head + block + a + [5, 6] + b, head + a + new + b + [7]
    assert reusable_runs(cached, prompt, 2, 16) == [(12, 2, 40), (54, 44, 40)]


def test_at_most_max_gapped_runs_are_taken() -> None:
    blocks = [list(range(1000 * k, 1000 * k + 20)) for k in range(1, 9)]
    cached = [0] + [t for i, blk in enumerate(blocks) for t in [*blk, 10 + i]]
    prompt = [0] + [t for i, blk in enumerate(blocks) for t in [*blk, 50 + i]]
    assert len(gapped_runs(cached, prompt, 1, 1, 16)) == 8
    assert len(reusable_runs(cached, prompt, 1, 16)) == 1 + MAX_GAPPED  # the first follows the prefix


@pytest.mark.timeout(60)
def test_the_gapped_scan_stays_linear_on_repeated_tokens() -> None:
    cached, prompt = ([3] * 255 + [4]) * 120, [9] + [3] * 30_000
    assert gapped_runs(cached, prompt, 1, 1, 256) == []


def test_the_prompts_kgrams_rule_out_a_path_without_changing_what_is_found() -> None:
    """``prompt_grams`` skips a path that shares no run after a few lookups (the common case of an
    unrelated cached prompt); where it does share one, the runs are those found without it."""
    head, old, new, tail = [1, 2, 3], list(range(100, 110)), list(range(500, 507)), list(range(200, 260))
    cached, prompt = head + old + tail + [9], head + new + tail + [5]
    grams = prompt_grams(prompt, 3, 32)
    assert reusable_runs(cached, prompt, 3, 32, grams) == reusable_runs(cached, prompt, 3, 32) == [(13, 10, 60)]
    unrelated = list(range(1000, 1400))
    assert gapped_runs(unrelated, prompt, 3, 0, 32, grams) == []
