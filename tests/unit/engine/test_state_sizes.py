"""Learning a context's sequence-state sizes instead of asking llama.cpp for each (engine/seqstate.py)."""

from __future__ import annotations

from localrun.engine.seqstate import StateSizes


def line(cells: int) -> int:
    return 24 + 3_104 * cells  # headers, and per cell its metadata and K and V rows


def test_two_answers_give_the_line_and_a_third_confirms_it() -> None:
    sizes = StateSizes()
    sizes.learn(10, line(10))
    sizes.learn(10, line(10))  # the same cell count says nothing about the slope
    sizes.learn(37, line(37))
    assert sizes.bound(5) is None  # not yet confirmed
    sizes.learn(200, line(200))
    assert sizes.bound(5) == line(5) and sizes.bound(20_000) == line(20_000)


def test_sizes_that_are_no_line_are_always_asked() -> None:
    sizes = StateSizes()  # a recurrent model: the state's size does not grow with its cells
    for cells in (3, 9, 40, 41, 300):
        sizes.learn(cells, 5_000_000 + cells % 7)
    assert sizes.bound(10) is None


def test_a_wrong_guess_starts_again_and_a_short_bound_ends_the_guessing() -> None:
    sizes = StateSizes()
    sizes.learn(10, 2_000)  # two answers that make a line the next one does not continue
    sizes.learn(20, 3_000)
    sizes.learn(30, line(30))  # the guess from the first two does not hold: from this answer on
    sizes.learn(40, line(40))
    assert sizes.bound(1) is None
    sizes.learn(50, line(50))
    assert sizes.bound(1) == line(1)
    sizes.too_small()
    assert sizes.bound(1) is None
