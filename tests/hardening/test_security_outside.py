"""Security from the outside: a real ``localrun serve`` on a loopback port, poked like an attacker would.

- API key: every documented route (from docs/openapi.yaml) refuses missing, wrong, malformed and
  near-miss keys with 401, except ``/`` and ``/health``; the right key gets through.
- CORS: foreign origins (including look-alikes of localhost and ``null``) get 403 and no
  ``Access-Control-Allow-Origin``, on simple requests and preflights alike.
- DNS rebinding: Host headers that are not local names get 403 while bound to loopback.
- Bind address: with no host given the daemon listens on 127.0.0.1 only.
- Logs: at the default INFO level no prompt or reply text reaches the daemon's log (a unique
  marker in every prompt, the replies themselves, on every generating route, errors included).
- Conversations: saved files are 0600 in a 0700 folder, whatever the umask.
"""

from __future__ import annotations

import os
import re
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from hardening_helpers import LiveDaemon, add_model, free_port, load_spec, record_figures, spec_operations

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KEY = "lr-test-key-0123456789"
PUBLIC = {"/", "/health"}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[LiveDaemon]:
    base = tmp_path_factory.mktemp("keyed")
    add_model(base / "models", "tiny", tiny_gguf)
    with LiveDaemon(base / "models", base / "daemon.log", env={"LOCALRUN_API_KEY": KEY,
                                                              "LOCALRUN_ORIGINS": "https://app.example"}) as d:
        yield d


def _concrete(path: str) -> str:
    return path.replace("{digest}", "sha256:" + "0" * 64).replace("{model}", "tiny")


BAD_AUTH: list[dict[str, str]] = [
    {}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer"}, {"Authorization": "Bearer  x"},
    {"Authorization": KEY}, {"Authorization": f"Basic {KEY}"}, {"Authorization": f"Bearer {KEY.upper()}"},
    {"Authorization": f"Bearer {KEY[:-1]}"}, {"Authorization": f"Bearer {KEY}x"},
    # x-api-key: KEY is a valid credential (Anthropic's SDKs send it, issue #14); a wrong one is not.
    {"Authorization": f"Bearer {KEY} {KEY}"}, {"X-Api-Key": "wrong"}, {"X-Api-Key": KEY[:-1]}, {"Cookie": f"key={KEY}"},
]


def test_every_route_needs_the_api_key_but_root_and_health(keyed: LiveDaemon) -> None:
    operations = sorted(spec_operations(load_spec()))
    tried = 0
    for method, path in operations:
        url = keyed.url + _concrete(path)
        for headers in BAD_AUTH:
            r = httpx.request(method, url, headers=headers, json={} if method in ("POST", "DELETE") else None,
                              timeout=30)
            tried += 1
            if path in PUBLIC:
                assert r.status_code == 200, (method, path, r.status_code)
                continue
            assert r.status_code == 401, (method, path, headers, r.status_code, r.text[:200])
            assert r.headers.get("WWW-Authenticate") == "Bearer"
            if method != "HEAD":
                body = r.json()
                error = body["error"]  # Ollama's: a string; OpenAI's, Anthropic's and llama-server's: an object
                message = error["message"] if isinstance(error, dict) else error
                assert "API key" in message and KEY not in r.text
        # With the key, /api/shutdown gets a body it refuses (400), so the daemon keeps serving the rest.
        body = {"grace_seconds": -1} if path == "/api/shutdown" else {}
        r = httpx.request(method, url, headers={"Authorization": f"Bearer {KEY}"},
                          json=body if method in ("POST", "DELETE") else None, timeout=60)
        assert r.status_code != 401, (method, path)
    record_figures("api_key", routes=len(operations), requests=tried, wrong_key_accepted=0)


@pytest.mark.parametrize("origin", [
    "https://evil.example", "http://localhost.evil.example", "http://127.0.0.1.nip.io", "http://evil.localhost.example",
    "null", "http://[::ffff:7f00:1].evil", "https://app.example.evil", "http://app.example", "ftp://localhost",
    "http://192.168.1.10:11435", "http://0x7f.0.0.1.evil.example",
])
def test_foreign_origins_are_refused(keyed: LiveDaemon, origin: str) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    for method, path, body in [("GET", "/api/tags", None), ("POST", "/api/generate", {"model": "tiny"}),
                               ("POST", "/v1/chat/completions", {"model": "tiny", "messages": []}),
                               ("DELETE", "/api/delete", {"model": "tiny"})]:
        r = httpx.request(method, keyed.url + path, headers={"Origin": origin, **auth}, json=body, timeout=30)
        assert r.status_code == 403, (origin, path, r.status_code)
        assert "Access-Control-Allow-Origin" not in r.headers
    r = httpx.options(keyed.url + "/api/delete", headers={
        "Origin": origin, "Access-Control-Request-Method": "DELETE", "Access-Control-Request-Headers": "authorization"})
    assert r.status_code == 403 and "Access-Control-Allow-Origin" not in r.headers
    # The model survived every one of those deletes.
    assert httpx.get(keyed.url + "/api/tags", headers=auth).json()["models"]


@pytest.mark.parametrize("origin", ["http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]:5173",
                                    "https://app.example", "http://app.localhost"])
def test_local_and_configured_origins_are_allowed(keyed: LiveDaemon, origin: str) -> None:
    r = httpx.options(keyed.url + "/api/chat", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"})
    assert r.status_code == 204 and r.headers["Access-Control-Allow-Origin"] == origin
    r = httpx.get(keyed.url + "/api/tags", headers={"Origin": origin, "Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == origin


@pytest.mark.parametrize("host", [
    "evil.example", "evil.example:11435", "127.0.0.1.nip.io", "localhost.evil.example", "attacker.com:80",
    "0x7f000001", "2130706433", "127.1", "[::ffff:127.0.0.1].evil", "lo calhost", "",
])
def test_rebinding_host_headers_are_refused(keyed: LiveDaemon, host: str) -> None:
    """A page on evil.example whose DNS now points at 127.0.0.1 still sends Host: evil.example."""
    raw = (f"GET /api/tags HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\n"
           "Connection: close\r\n\r\n").encode()
    with socket.create_connection((keyed.host, keyed.port), timeout=10) as s:
        s.sendall(raw)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    if host in ("0x7f000001", "2130706433", "127.1"):
        assert status in (200, 403)  # numeric spellings of loopback: harmless either way
    elif host == "":
        assert status < 500  # no browser sends an empty Host: not a rebinding vector
    else:
        assert status in (400, 403), (host, reply[:300])
        assert b'"models"' not in reply


def test_local_host_headers_are_served(keyed: LiveDaemon) -> None:
    for host in (f"localhost:{keyed.port}", f"127.0.0.1:{keyed.port}", f"[::1]:{keyed.port}", "localhost"):
        r = httpx.get(keyed.url + "/api/tags", headers={"Host": host, "Authorization": f"Bearer {KEY}"})
        assert r.status_code == 200, host


def _non_loopback_ip() -> str | None:
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return str(a.address)
    return None


def test_the_default_bind_address_is_loopback_only(tmp_path: Path) -> None:
    port = free_port()
    daemon = LiveDaemon(tmp_path / "models", tmp_path / "daemon.log", port=port, env={"LOCALRUN_HOST": f":{port}"})
    with daemon:
        assert daemon.proc is not None
        listening = [c.laddr for c in psutil.Process(daemon.proc.pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening and all(addr.ip in ("127.0.0.1", "::1") for addr in listening), listening
        other = _non_loopback_ip()
        if other is not None:
            with pytest.raises(OSError):
                socket.create_connection((other, port), timeout=3).close()
    record_figures("bind_default", listening=[f"{a.ip}:{a.port}" for a in listening])


def test_binding_to_all_interfaces_without_a_key_warns(tmp_path: Path) -> None:
    port = free_port()
    daemon = LiveDaemon(tmp_path / "models", tmp_path / "daemon.log", port=port,
                        env={"LOCALRUN_HOST": f"0.0.0.0:{port}"})
    with daemon:
        pass
    assert re.search(r"WARNING .*without LOCALRUN_API_KEY", daemon.log_text()), daemon.log_text()[-2000:]


MARKER = "zq7-secret-prompt-marker-41d9"


def test_no_prompt_or_reply_text_in_logs_above_debug(tmp_path: Path, tiny_gguf: Path) -> None:
    add_model(tmp_path / "models", "tiny", tiny_gguf)
    replies: list[str] = []
    daemon = LiveDaemon(tmp_path / "models", tmp_path / "daemon.log", log_level="INFO")
    with daemon:
        u = daemon.url
        calls: list[tuple[str, dict[str, Any]]] = [
            ("/api/generate", {"model": "tiny", "prompt": f"{MARKER} generate", "stream": False,
                               "options": {"num_predict": 24}}),
            ("/api/generate", {"model": "tiny", "prompt": f"{MARKER} stream", "options": {"num_predict": 24}}),
            ("/api/generate", {"model": "tiny", "prompt": f"{MARKER} raw", "raw": True, "system": MARKER,
                               "stream": False, "options": {"num_predict": 8}}),
            ("/api/chat", {"model": "tiny", "stream": False, "options": {"num_predict": 24},
                           "messages": [{"role": "system", "content": MARKER}, {"role": "user", "content": MARKER}]}),
            ("/api/chat", {"model": "tiny", "format": "json", "options": {"num_predict": 24},
                           "messages": [{"role": "user", "content": MARKER}]}),
            ("/api/embed", {"model": "tiny", "input": [MARKER, MARKER + " two"]}),
            ("/api/embeddings", {"model": "tiny", "prompt": MARKER}),
            ("/v1/chat/completions", {"model": "tiny", "max_tokens": 24,
                                      "messages": [{"role": "user", "content": MARKER}]}),
            ("/v1/chat/completions", {"model": "tiny", "max_tokens": 24, "stream": True,
                                      "messages": [{"role": "user", "content": MARKER}],
                                      "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}),
            ("/v1/completions", {"model": "tiny", "prompt": MARKER, "max_tokens": 24, "echo": True}),
            ("/v1/embeddings", {"model": "tiny", "input": MARKER}),
            # Failing requests must not log the prompt either.
            ("/api/generate", {"model": "tiny", "prompt": MARKER, "options": {"temperature": "hot"}}),
            ("/api/chat", {"model": "tiny", "messages": [{"role": MARKER, "content": MARKER}]}),
            ("/api/generate", {"model": "tiny", "prompt": MARKER, "template": "{{ .Prompt " + MARKER,
                               "stream": False}),
            ("/api/generate", {"model": MARKER, "prompt": MARKER}),
            ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": MARKER}],
                                      "response_format": {"type": MARKER}}),
            ("/api/generate", {"model": "tiny", "prompt": MARKER * 5000, "stream": False,
                               "options": {"num_predict": 2, "num_ctx": 64}}),
        ]
        for path, body in calls:
            r = httpx.post(u + path, json=body, timeout=120)
            text = r.text
            for m in re.finditer(r'"(?:response|content|text)":\s*"((?:[^"\\]|\\.){12,})"', text):
                replies.append(m.group(1))
        log = daemon.log_text()
    assert MARKER not in log, [line for line in log.splitlines() if MARKER in line][:5]
    leaked = [r for r in replies if r in log and MARKER not in r]
    assert not leaked, leaked[:5]
    assert "request endpoint=" in log  # the per-request line is there, just without the text
    record_figures("logs_no_prompt_text", requests=len(calls), replies_checked=len(replies), leaks=0)


def test_conversation_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    from localrun.tui.conversations import Conversation, ConversationStore

    old = os.umask(0)
    try:
        store = ConversationStore(tmp_path / "conversations")
        conv = Conversation.new("tiny")
        conv.messages.append({"role": "user", "content": MARKER})
        path = store.save(conv)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        path.chmod(0o644)  # an old file someone loosened: the next save makes it private again
        conv.messages.append({"role": "assistant", "content": "reply"})
        path = store.save(conv)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
        loose = tmp_path / "loose"
        loose.mkdir(mode=0o755)
        other = ConversationStore(loose)
        assert stat.S_IMODE(other.save(Conversation.new("tiny")).stat().st_mode) == 0o600
    finally:
        os.umask(old)
