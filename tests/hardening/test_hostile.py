"""Hostile models, hubs and requests against a real daemon: no freeze, no OOM, no wedged queue, no bad blob.

Each test replays a shape that broke localrun (issue #13) against ``localrun serve`` on loopback with the
real engine on tiny GGUFs and a stand-in hub, and checks what a user would notice: the offending request
gets a clear 4xx (or a 502 naming the hub's fault) in bounded time, every other route keeps answering
meanwhile, the daemon's memory stays flat, the store serves only bytes that match their digests. Figures
go to ``record_figures`` for RELIABILITY.md; SECURITY.md names the Ollama / llama.cpp advisory each mirrors.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from fakehub import FakeHub
from gguf import GGUFValueType
from hardening_helpers import LiveDaemon, add_model, record_figures
from tinymodel import write_tiny_gguf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = "evil-org/Tiny-GGUF"
FILE = "tiny-Q4_K_M.gguf"
POW = "{{ (9 ** 15000000) % 7 }}"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def hub(base: Path) -> Iterator[FakeHub]:
    with FakeHub() as h:  # its own weights: a blob the store already holds would not be downloaded
        h.add_file(REPO, FILE, write_tiny_gguf(base / "hub.gguf", seed=7, name="hub").read_bytes())
        yield h


def plant(models: Path, name: str, gguf: Path, stand_in: Path) -> None:
    """Put a model whose GGUF the store would refuse into the store anyway (as an older version could)."""
    from localrun.store import create as create_module
    from localrun.store.gguf_file import read_gguf

    real = create_module.read_gguf
    create_module.read_gguf = lambda path: read_gguf(stand_in)  # type: ignore[assignment]
    try:
        add_model(models, name, gguf)
    finally:
        create_module.read_gguf = real  # type: ignore[assignment]


@pytest.fixture(scope="module")
def daemon(base: Path, tiny_gguf: Path, hub: FakeHub) -> Iterator[LiveDaemon]:
    models = base / "models"
    add_model(models, "tiny", tiny_gguf)
    add_model(models, "pow-template", write_tiny_gguf(base / "pow.gguf", chat_template=POW, name="pow"))
    for name, meta in {"ctx-minus-one": {"llama.context_length": (-1, GGUFValueType.INT32)},
                       "heads-inf": {"llama.attention.head_count": (float("inf"), GGUFValueType.FLOAT32)}}.items():
        plant(models, name, write_tiny_gguf(base / f"{name}.gguf", metadata=meta, name=name), tiny_gguf)
    live = LiveDaemon(models, base / "daemon.log", env={
        "HF_ENDPOINT": hub.url, "LOCALRUN_KEEP_ALIVE": "60s", "LOCALRUN_PULL_TIMEOUT": "8s"})
    live.start()
    yield live
    live.stop()
    assert "Traceback" not in live.log_text(), live.log_text()[-4000:]


def upload(daemon: LiveDaemon, path: Path) -> str:
    """Upload ``path`` as a blob, as `localrun create` and Ollama's client do; its digest."""
    import hashlib

    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    r = httpx.post(daemon.url + f"/api/blobs/{digest}", content=path.read_bytes(), timeout=60)
    assert r.status_code in (200, 201), r.text
    return digest


def _ignore_errors(fn: Any, *args: Any, **kw: Any) -> None:
    with contextlib.suppress(httpx.HTTPError):
        fn(*args, **kw)


def rss(daemon: LiveDaemon) -> int:
    assert daemon.proc is not None
    return int(psutil.Process(daemon.proc.pid).memory_info().rss)


def timed(method: str, url: str, **kw: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    r = httpx.request(method, url, timeout=kw.pop("timeout", 120), **kw)
    return r, time.monotonic() - started


class Background:
    """Requests running in threads while the test probes the daemon."""

    def __init__(self) -> None:
        self.results: list[Any] = []
        self.threads: list[threading.Thread] = []

    def start(self, fn: Any, *args: Any, **kw: Any) -> None:
        def run() -> None:
            try:
                self.results.append(fn(*args, **kw))
            except Exception as exc:
                self.results.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self, timeout: float = 120) -> list[Any]:
        for thread in self.threads:
            thread.join(timeout)
        return self.results


def probe_routes(daemon: LiveDaemon) -> dict[str, float]:
    """Latency of /health, /api/tags and a short generation (a raw prompt: no template work)."""
    health, t_health = timed("GET", daemon.url + "/health", timeout=10)
    tags, t_tags = timed("GET", daemon.url + "/api/tags", timeout=10)
    gen, t_gen = timed("POST", daemon.url + "/api/generate", timeout=60, json={
        "model": "tiny", "prompt": "hello", "raw": True, "stream": False, "options": {"num_predict": 4}})
    assert (health.status_code, tags.status_code, gen.status_code) == (200, 200, 200), gen.text[:300]
    return {"health_s": round(t_health, 3), "tags_s": round(t_tags, 3), "generate_s": round(t_gen, 3)}


# -- 1. templates ------------------------------------------------------------------------------


def test_a_per_request_template_bomb_is_a_400_and_never_freezes_the_daemon(daemon: LiveDaemon) -> None:
    before = rss(daemon)
    bg = Background()
    for source in (POW, "{{ ('a' * 1200000000)|length }}"):
        bg.start(timed, "POST", daemon.url + "/api/generate",
                 json={"model": "tiny", "prompt": "hi", "template": source, "stream": False})
    during = probe_routes(daemon)
    answers = bg.join()
    for r, seconds in answers:
        assert r.status_code == 400 and r.json()["code"] == "template_limit", r.text[:300]
        assert seconds < 10
    grown = rss(daemon) - before
    assert grown < 64 << 20, grown  # was +1 GB for the repetition, minutes of frozen routes for the power
    record_figures("template_bombs", answer_s=[round(s, 3) for _, s in answers], rss_growth_mb=grown >> 20, **during)


def test_a_gguf_whose_template_is_refused_loads_with_a_warning_and_a_plain_prompt(daemon: LiveDaemon) -> None:
    r, seconds = timed("POST", daemon.url + "/api/chat", json={
        "model": "pow-template", "messages": [{"role": "user", "content": "hello"}], "stream": False,
        "options": {"num_predict": 4}})
    assert r.status_code == 200, r.text[:300]
    assert "GGUF chat template is refused" in daemon.log_text()
    record_figures("gguf_template_refused", chat_s=round(seconds, 3))


def test_seven_template_loops_at_once_leave_the_other_routes_answering(daemon: LiveDaemon) -> None:
    # CPU-heavy but made of few steps: only the worker processes' limits stop these.
    sorts = "{% for i in range(1000) %}{{ ((range(100000)|list) * 10)|sort|length }}{% endfor %}"
    bg = Background()
    for _ in range(7):
        bg.start(timed, "POST", daemon.url + "/api/generate",
                 json={"model": "tiny", "prompt": "hi", "template": sorts, "stream": False}, timeout=200)
    time.sleep(1.0)
    during = probe_routes(daemon)
    answers = bg.join(timeout=200)
    assert all(r.status_code == 400 and "stopped" in r.json()["error"] for r, _ in answers), answers
    assert max(during.values()) < 20
    record_figures("seven_template_loops", slowest_answer_s=round(max(s for _, s in answers), 1), **during)


# -- 2 and 3. GGUF metadata, the scheduler -------------------------------------------------------


@pytest.mark.parametrize(("meta", "key"), [
    ({"llama.block_count": (2**31, GGUFValueType.UINT32)}, "block_count"),
    ({"llama.context_length": (-1, GGUFValueType.INT32)}, "context_length"),
    ({"llama.attention.head_count": (float("nan"), GGUFValueType.FLOAT32)}, "head_count"),
])
def test_hostile_metadata_is_a_400_on_create(daemon: LiveDaemon, base: Path, meta: Any, key: str) -> None:
    digest = upload(daemon, write_tiny_gguf(base / f"create-{key}.gguf", metadata=meta))
    before = rss(daemon)
    r = httpx.post(daemon.url + "/api/create", timeout=60, json={"model": f"bad-{key}", "files": {"m.gguf": digest},
                                                                  "stream": False})
    assert r.status_code == 400 and key in r.json()["error"], r.text[:300]
    assert rss(daemon) - before < 64 << 20  # block_count 2^31 drove the daemon to 21.9 GB


def test_a_sysfs_path_and_deep_arrays_are_400s(daemon: LiveDaemon, base: Path) -> None:
    deep = base / "deep.gguf"
    arch = b"general.architecture"
    nested = struct.pack("<I", GGUFValueType.ARRAY) + struct.pack("<IQ", GGUFValueType.ARRAY, 1) * 4999 \
        + struct.pack("<IQB", GGUFValueType.UINT8, 1, 7)
    deep.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + struct.pack("<Q", len(arch)) + arch
                     + struct.pack("<IQ", GGUFValueType.STRING, 5) + b"llama" + struct.pack("<Q", 6) + b"x.deep"
                     + nested)
    sysfs = next((p for p in ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys/power/state")
                  if Path(p).is_file()), None)
    for source in [upload(daemon, deep)] + ([sysfs] if sysfs else []):  # a path is refused unread
        r = httpx.post(daemon.url + "/api/create", timeout=60, json={"model": "bad", "from": source, "stream": False})
        assert r.status_code == 400, (source, r.text[:300])


def test_planted_hostile_models_never_wedge_the_queue_or_break_the_listing(daemon: LiveDaemon) -> None:
    tags = httpx.get(daemon.url + "/api/tags", timeout=30)
    assert tags.status_code == 200 and {"heads-inf:latest", "ctx-minus-one:latest"} <= {
        m["name"] for m in tags.json()["models"]}  # a float inf head count made every listing a 500
    for name in ("ctx-minus-one", "heads-inf"):
        r = httpx.post(daemon.url + "/api/generate", timeout=60,
                       json={"model": name, "prompt": "hi", "stream": False})
        message = r.json()["error"]
        assert r.status_code == 400 and ("out of range" in message or "whole number" in message), message
    r, seconds = timed("POST", daemon.url + "/api/generate", json={
        "model": "tiny", "prompt": "hi", "raw": True, "stream": False, "options": {"num_predict": 2}})
    assert r.status_code == 200  # the request behind the failed ones is served: the queue moves on
    record_figures("hostile_models_queue", next_request_s=round(seconds, 3))


# -- 4 and 7. the hub ---------------------------------------------------------------------------


def gzip_bomb() -> bytes:
    out = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 24)
    return b"".join(out.compress(block) for _ in range(64)) + out.flush()


@pytest.mark.allow_5xx(reason="a 502: the fake hub sends a gzip bomb on purpose")
def test_a_gzip_bomb_listing_is_a_502_without_inflating(daemon: LiveDaemon, hub: FakeHub) -> None:
    bomb = gzip_bomb()
    hub.listing_answer = (200, {"Content-Encoding": "gzip"}, bomb)
    before = rss(daemon)
    try:
        r, seconds = timed("POST", daemon.url + "/api/pull", json={"model": f"hf.co/{REPO}", "stream": False})
    finally:
        hub.listing_answer = None
    assert r.status_code == 502 and "inflates" in r.json()["error"], r.text[:300]
    grown = rss(daemon) - before
    assert grown < 64 << 20, grown  # was +2.9 GB
    record_figures("gzip_bomb_listing", compressed_bytes=len(bomb), inflated_bytes=1 << 30,
                   rss_growth_mb=grown >> 20, answer_s=round(seconds, 2))


@pytest.mark.allow_5xx(reason="a 502: the fake hub refuses the pull on purpose")
@pytest.mark.parametrize(("status", "message"), [(403, "Access to this model is restricted"),
                                                 (500, "Internal Error")])
def test_a_refused_pull_is_a_502_with_the_hubs_reason(daemon: LiveDaemon, hub: FakeHub, status: int,
                                                      message: str) -> None:
    hub.listing_answer = (status, {}, json.dumps({"error": message}).encode())
    try:
        r = httpx.post(daemon.url + "/api/pull", timeout=60, json={"model": f"hf.co/{REPO}", "stream": False})
    finally:
        hub.listing_answer = None
    assert r.status_code == 502 and str(status) in r.json()["error"] and message in r.json()["error"], r.text


@pytest.mark.allow_5xx(reason="a 502: the fake hub lists malformed sizes on purpose")
@pytest.mark.parametrize("size", ["abc", 0, -1])
def test_malformed_hub_sizes_are_a_502(daemon: LiveDaemon, hub: FakeHub, size: Any) -> None:
    hub.advertise_size[FILE] = size
    try:
        r = httpx.post(daemon.url + "/api/pull", timeout=60, json={"model": f"hf.co/{REPO}", "stream": False})
    finally:
        hub.advertise_size.clear()
    assert r.status_code == 502 and "malformed" in r.json()["error"], r.text[:300]


@pytest.mark.allow_5xx(reason="502s: the fake hub trickles bytes past the pull deadline on purpose")
def test_seven_trickling_pulls_end_by_their_deadline_and_hang_nothing(daemon: LiveDaemon, hub: FakeHub) -> None:
    hub.trickle = 0.2  # a byte every 0.2 s: fast enough for no read timeout, too slow to ever finish
    bg = Background()
    try:
        for _ in range(7):
            bg.start(timed, "POST", daemon.url + "/api/pull", json={"model": f"hf.co/{REPO}", "stream": False},
                     timeout=120)
        time.sleep(2.0)
        during = probe_routes(daemon)
        answers = bg.join(timeout=120)
    finally:
        hub.trickle = None
    assert all(not isinstance(a, Exception) for a in answers), answers
    assert all(r.status_code == 502 for r, _ in answers), [r.text[:200] for r, _ in answers]
    assert max(during.values()) < 5
    r, seconds = timed("POST", daemon.url + "/api/pull", json={"model": f"hf.co/{REPO}", "stream": False})
    assert r.status_code == 200, r.text[:300]  # the lock was released: a later pull completes
    record_figures("trickling_pulls", pulls=7, slowest_pull_s=round(max(s for _, s in answers), 1),
                   later_pull_s=round(seconds, 2), **during)


def test_userinfo_in_the_host_header_is_refused(daemon: LiveDaemon) -> None:
    raw = (f"GET /api/tags HTTP/1.1\r\nHost: localhost:{daemon.port}@evil.example\r\nConnection: close\r\n\r\n")
    with socket.create_connection((daemon.host, daemon.port), timeout=10) as s:
        s.sendall(raw.encode())
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    assert int(reply.split(b" ", 2)[1]) == 403 and b'"models"' not in reply


# -- 5. grammar -----------------------------------------------------------------------------------


def test_an_explosive_pattern_is_refused_before_generation(daemon: LiveDaemon) -> None:
    r, seconds = timed("POST", daemon.url + "/api/generate", json={
        "model": "tiny", "prompt": "hi", "stream": False,
        "format": {"type": "string", "pattern": "^(a?){2000}a{2000}$"}})
    assert r.status_code == 400 and r.json()["code"] == "unsupported_format", r.text[:300]
    assert seconds < 5
    record_figures("explosive_pattern", answer_s=round(seconds, 3))


# -- 6. the store ---------------------------------------------------------------------------------


def test_reuploading_the_right_bytes_repairs_a_rotten_blob(daemon: LiveDaemon, base: Path, tiny_gguf_b: Path) -> None:
    import hashlib
    import shutil

    victim = Path(shutil.copyfile(tiny_gguf_b, base / "victim.gguf"))
    digest = "sha256:" + hashlib.sha256(victim.read_bytes()).hexdigest()
    assert httpx.post(daemon.url + f"/api/blobs/{digest}", content=victim.read_bytes(), timeout=60).status_code == 201
    r = httpx.post(daemon.url + "/api/create", timeout=60, json={"model": "victim", "files": {"v.gguf": digest},
                                                                  "stream": False})
    assert r.status_code == 200, r.text
    blob = daemon.models_dir / "blobs" / digest.replace(":", "-")
    st = blob.stat()
    with open(blob, "r+b") as f:  # bit rot: same size, inode, mtime
        f.seek(st.st_size // 2)
        f.write(bytes(64))
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert blob.read_bytes() != victim.read_bytes()
    r = httpx.post(daemon.url + f"/api/blobs/{digest}", content=victim.read_bytes(), timeout=60)
    assert r.status_code == 200  # was: 200 and nothing replaced
    assert blob.read_bytes() == victim.read_bytes()


def test_temp_files_of_a_killed_create_are_removed_at_start_up(tmp_path: Path) -> None:
    models = tmp_path / "models"
    daemon = LiveDaemon(models, tmp_path / "daemon.log").start()

    def body() -> Iterator[bytes]:  # an upload that never ends
        while True:
            yield bytes(1 << 20)

    sender = threading.Thread(target=lambda: _ignore_errors(
        httpx.post, daemon.url + "/api/blobs/sha256:" + "ef" * 32, content=body(), timeout=60), daemon=True)
    try:
        sender.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not [
                p for p in (models / "blobs").glob(".tmp-*") if p.stat().st_size > 0]:
            time.sleep(0.05)
        daemon.kill()  # SIGKILL mid-upload: nothing gets to clean up
    finally:
        daemon.kill()
        daemon.stop()
        sender.join(10)
    left = [p for p in (models / "blobs").iterdir() if p.name.startswith(".tmp-")]
    assert left, "the create did not get as far as a temp file"
    with LiveDaemon(models, tmp_path / "daemon2.log") as again:
        assert not [p for p in (models / "blobs").iterdir() if p.name.startswith(".tmp-")]
        assert "orphaned temp file" in again.log_text()
    record_figures("orphaned_temp_files", left_by_sigkill=len(left), after_restart=0)
