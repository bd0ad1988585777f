"""The request body bench sends: extras pass through, min_tokens never above max_tokens."""

from __future__ import annotations

from localrun.bench.loadgen import LoadPlan, build_payload


def test_min_tokens_is_capped_at_the_requests_max_tokens() -> None:
    plan = LoadPlan(api="completions", output_tokens=64, extras={"ignore_eos": True, "min_tokens": 64})
    measured = build_payload(plan, "m", "the of and")
    assert (measured["max_tokens"], measured["min_tokens"], measured["ignore_eos"]) == (64, 64, True)
    priming = build_payload(plan, "m", "the of and", max_tokens=4)  # vLLM and localrun refuse min > max
    assert (priming["max_tokens"], priming["min_tokens"]) == (4, 4)
    assert plan.extras["min_tokens"] == 64  # the plan itself is untouched


def test_chat_payload_without_extras() -> None:
    payload = build_payload(LoadPlan(api="chat", output_tokens=8), "m", "hi")
    assert payload["messages"] == [{"role": "user", "content": "hi"}] and "min_tokens" not in payload
