"""Host and Origin parsing follows RFC 3986: userinfo is not a host (issue #13, point 7).

``Host: localhost:80@evil.example`` was accepted: the parser kept the text before the last colon.
A browser never sends userinfo in Host or Origin, so anything that is not ``host[:port]`` is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import DictStore

pytestmark = pytest.mark.timeout(120)

MALFORMED = ["localhost:80@evil.example", "localhost@evil.example", "127.0.0.1:11435@evil.example:80",
             "[::1]@evil.example", "[::1]:80@evil.example", "localhost:80/evil", "localhost:abc",
             "localhost:80:80", "[::1", "[evil.example]", "local host", "localhost#.evil.example", "::1"]
LOCAL = ["localhost", "localhost:11435", "127.0.0.1", "127.0.0.1:1", "[::1]", "[::1]:11435", "app.localhost:80"]


@pytest.fixture
def store(tiny_gguf: Path) -> DictStore:
    return DictStore({"a": tiny_gguf})


async def test_userinfo_and_malformed_hosts_are_refused(serve_app: Any, store: DictStore) -> None:
    client = await serve_app(store)
    for host in MALFORMED:
        r = await client.get("/api/version", headers={"Host": host})
        assert r.status == 403, host
    for host in LOCAL:
        assert (await client.get("/api/version", headers={"Host": host})).status == 200, host


async def test_userinfo_in_an_origin_is_not_a_local_origin(serve_app: Any, store: DictStore) -> None:
    client = await serve_app(store)
    for origin in ["http://localhost:80@evil.example", "http://localhost@evil.example", "http://[::1]@evil.example"]:
        r = await client.get("/api/version", headers={"Origin": origin})
        assert r.status == 403 and "Access-Control-Allow-Origin" not in r.headers, origin
    r = await client.get("/api/version", headers={"Origin": "http://localhost:3000"})
    assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
