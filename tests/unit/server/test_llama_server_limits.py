"""llama-server's ``n_indent`` and ``t_max_predict_ms`` as /infill applies them (server/llamacpp.py),
and its sampler names as the option table takes them."""

from __future__ import annotations

import pytest

from localrun.engine import limits
from localrun.errors import OptionError
from localrun.server.llamacpp import _Limits


def _feed(limit: _Limits, pieces: list[str]) -> tuple[str, bool]:
    kept = ""
    for piece in pieces:
        text, stop = limit.feed(piece)
        kept += text
        if stop:
            return kept, True
    return kept, False


def test_a_line_less_indented_than_n_indent_ends_the_completion_before_its_first_character() -> None:
    assert _feed(_Limits(4, 0), ["x = 1\n", "    y = 2\n", "z", " = 3"]) == ("x = 1\n    y = 2\n", True)
    # the first line (the rest of the cursor's line) is never checked; indentation may come in pieces;
    # an empty line ends it too (its line break is its first character), as in llama-server
    assert _feed(_Limits(4, 0), ["a\n", "  ", "  b\n", "    c"]) == ("a\n    b\n    c", False)
    assert _feed(_Limits(4, 0), ["a\n", "    b\n", "\n", "    c"]) == ("a\n    b\n", True)
    # a piece holding several lines is checked line by line, and cut in the middle
    assert _feed(_Limits(2, 0), ["a\n  b\n c\n"]) == ("a\n  b\n ", True)


def test_after_t_max_predict_ms_the_next_line_break_ends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0, 10_000_000, 20_000_000, 30_000_000])
    monkeypatch.setattr("localrun.server.llamacpp.time.perf_counter_ns", lambda: next(clock))
    limit = _Limits(0, 15)  # 15 ms after the first token
    assert limit.feed("a") == ("a", False)
    assert limit.feed("b\n") == ("b\n", False)  # 10 ms
    assert limit.feed("c") == ("c", False)      # 20 ms, but no line break
    assert limit.feed("\nd") == ("\nd", True)   # 30 ms, a line break


def test_sampler_names_take_llama_servers_spellings() -> None:
    assert limits.check("samplers", ["Top-K", "nucleus", "temp", "dry", "infill", "typ"]) == \
        ("top_k", "top_p", "temperature", "infill", "typ_p")
    assert limits.check("samplers", []) == ()
    for bad in (["mirostat"], "top_k", [1]):
        with pytest.raises(OptionError, match="sampler names"):
            limits.check("samplers", bad)
