"""A hub's error bodies and JSON answers read as text it sent, never a crash (hostile or broken hubs)."""

from __future__ import annotations

import httpx
import pytest

from localrun.errors import PullError
from localrun.store.hubhttp import hub_reason, request_json


def test_an_error_body_nested_past_the_limit_is_quoted_not_parsed() -> None:
    response = httpx.Response(403, request=httpx.Request("GET", "http://hub.invalid/api/models/x"))
    reason = hub_reason(response, b"[" * 60000)  # Python's own parser would raise RecursionError
    assert reason.startswith("403 Forbidden: [[[") and len(reason) < 250


def test_an_answer_nested_past_the_limit_is_a_pull_error() -> None:
    deep = b"[" * 5000 + b"]" * 5000
    hub = httpx.MockTransport(lambda request: httpx.Response(200, stream=httpx.ByteStream(deep)))
    client = httpx.Client(transport=hub)
    with client, pytest.raises(PullError, match=r"not valid JSON.*nests deeper than 128"):
        request_json(client, "GET", "http://hub.invalid/api/models/x", "the repo's file list")
