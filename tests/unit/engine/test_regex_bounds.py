"""Pattern bounds: the JSON-schema patterns that made constrained sampling explode are refused up front.

``^(a?){2000}a{2000}$`` passed validation and stalled a model for every client for 30 s or more,
its cancel ignored (issue #13, point 5); ``(a?){256}`` produced one token in 40 s on this machine.
"""

from __future__ import annotations

import pytest

from localrun.engine.grammar import grammar_for
from localrun.engine.regex_bounds import MAX_NULLABLE_REPEAT, check_pattern
from localrun.errors import GrammarError

HOSTILE = {
    "^(a?){2000}a{2000}$": "can match nothing 2000 times",
    "^(a*)*$": "without bound",
    "^((a|b)*)*c$": "without bound",
    "^(a|)+$": "without bound",
    "^(a?){17}$": "17 times",
    "^([a-z]*,?){100}$": "100 times",
    "^[a-z]{1,4000}$": "optional copies",
    "^(a{100}){100}$": "more than 4096 elements",
    "^((((((((((((((((((((((((((((((((((a))))))))))))))))))))))))))))))))))$": "deeper than",
    "^a{99999999}$": "not a number up to",
    "^(ab$": "not closed",
    "^[ab$": "not closed",
}
FINE = ["^\\d{4}-\\d{2}-\\d{2}$", "^[a-z0-9_]{3,32}$", "^\\+?[0-9]{7,15}$", "^[A-Z][a-z]+( [A-Z][a-z]+)*$",
        "^(a?){16}$", "^[a-z]{1,1000}$", "^[^\\]]+$", "^(GET|POST|PUT)$", "^[a-z]+(,[a-z]+)*$"]


@pytest.mark.parametrize("pattern", list(HOSTILE))
def test_explosive_patterns_are_refused_before_generation(pattern: str) -> None:
    with pytest.raises(GrammarError, match=HOSTILE[pattern]):
        check_pattern(pattern)
    with pytest.raises(GrammarError):  # and through the schema path, as requests reach it
        grammar_for({"type": "string", "pattern": pattern}, None)


@pytest.mark.parametrize("pattern", FINE)
def test_real_patterns_pass(pattern: str) -> None:
    check_pattern(pattern)
    assert grammar_for({"type": "string", "pattern": pattern}, None)


def test_the_nullable_repeat_bound_is_exact() -> None:
    check_pattern(f"^(a?){{{MAX_NULLABLE_REPEAT}}}$")
    with pytest.raises(GrammarError):
        check_pattern(f"^(a?){{{MAX_NULLABLE_REPEAT + 1}}}$")
