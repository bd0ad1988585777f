"""Which member of a pool serves a request: healthy first, affinity, least-loaded, cool-down (fake clock)."""

from __future__ import annotations

from localrun.upstream.pool import (
    AFFINITY_SLACK,
    BASE_COOL_DOWN_S,
    MAX_COOL_DOWN_S,
    Member,
    MemberState,
    Pool,
    prefix_keys,
)
from localrun.upstream.spec import Api, make_spec


def _pool(*urls: str, models: str | None = None) -> Pool:
    return Pool("gpu", [Member(make_spec("gpu", u, models=models)) for u in urls])


def test_idle_members_take_turns_and_busy_ones_wait() -> None:
    pool = _pool("http://a/v1", "http://b/v1")
    picks = []
    for _ in range(4):
        first = pool.order("m", now=0.0)[0]
        first.begin()
        first.end()
        picks.append(first.url)
    assert picks == ["http://a", "http://b", "http://a", "http://b"]
    a, b = pool.members
    a.begin()
    a.begin()
    assert pool.order("m", now=0.0)[0] is b  # fewest in flight


def test_a_conversation_returns_to_the_member_holding_its_prefix() -> None:
    pool = _pool("http://a/v1", "http://b/v1")
    a, b = pool.members
    turn1 = prefix_keys(["tools", "system", "user 1"])
    turn2 = prefix_keys(["tools", "system", "user 1", "assistant 1", "user 2"])
    other = prefix_keys(["tools", "system", "another user"])
    b.begin()
    b.end()  # b has served more: round robin alone would pick a
    pool.remember(turn1, b)
    assert pool.order("m", 0.0, turn2)[0] is b
    assert pool.order("m", 0.0, other)[0] is b  # the shared system prompt is b's too
    for _ in range(AFFINITY_SLACK + 1):
        b.begin()
    assert pool.order("m", 0.0, turn2)[0] is a  # too busy: load wins over affinity


def test_failures_cool_a_member_down_and_a_check_brings_it_back() -> None:
    pool = _pool("http://a/v1", "http://b/v1")
    a, b = pool.members
    a.failed(now=100.0, reason="connection refused")
    assert a.state(100.0) is MemberState.COOLING
    assert pool.order("m", 100.0) == [b, a]  # cooling members are the last resort
    assert a.state(100.0 + BASE_COOL_DOWN_S + 0.1) is not MemberState.COOLING
    for _ in range(10):
        a.failed(now=200.0, reason="again")
    assert a.cool_until == 200.0 + MAX_COOL_DOWN_S
    a.checked(201.0, Api.OPENAI, ("m",))
    assert a.state(201.0) is MemberState.HEALTHY and a.consecutive_failures == 0
    assert a.failures == 11  # the history stays for ps and /metrics


def test_model_names_match_with_or_without_latest() -> None:
    m = Member(make_spec("p", "http://a", models="qwen2.5-coder:0.5b,tiny:latest"))
    assert m.serves("qwen2.5-coder:0.5b") == "qwen2.5-coder:0.5b"
    assert m.serves("tiny") == "tiny:latest"
    assert m.serves("other") is None
    unknown = Member(make_spec("p", "http://b"))
    assert unknown.serves("anything") == "anything"  # not listed yet: asking will tell
    pool = Pool("p", [m, unknown])
    assert pool.serving("other") == [unknown]


def test_prefix_keys_chain() -> None:
    keys = prefix_keys(["a", "b", "c"])
    assert len(set(keys)) == 3
    assert prefix_keys(["a", "b"]) == keys[:2]
    assert prefix_keys(["ab"])[0] != keys[1]
