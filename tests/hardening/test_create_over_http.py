"""Creating models over HTTP as an attacker and as a user would (issue #26, points 1 and 4).

Against a real ``localrun serve`` on loopback:

- a create request that names a path on the daemon's machine gets one answer whatever is at the
  path (Ollama's CVE-2024-39719 was a file-existence oracle built from those answers);
- ``localrun create -f Modelfile`` still builds from local files (FROM, ADAPTER, a blob path that
  ``show --modelfile`` printed) by uploading them as blobs, skipping what the daemon holds;
- Ollama's own client (``create_blob`` + ``create(files=...)``) still works;
- a 1 TB sparse file behind a GGUF header is refused before anything hashes it;
- an upload, pull or hub create whose client goes away stops, keeping what a resume can use.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakehub import FakeHub
from hardening_helpers import LiveDaemon, add_model
from tinymodel import write_tiny_gguf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = "someone/Trickle-GGUF"
FILE = "trickle-Q4_K_M.gguf"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("create_http")


@pytest.fixture(scope="module")
def hub(base: Path) -> Iterator[FakeHub]:
    with FakeHub() as h:
        h.add_file(REPO, FILE, write_tiny_gguf(base / "hub.gguf", seed=11, name="trickle").read_bytes())
        yield h


@pytest.fixture(scope="module")
def daemon(base: Path, tiny_gguf: Path, hub: FakeHub) -> Iterator[LiveDaemon]:
    models = base / "models"
    add_model(models, "tiny", tiny_gguf)
    live = LiveDaemon(models, base / "daemon.log", env={"HF_ENDPOINT": hub.url, "LOCALRUN_PULL_TIMEOUT": "60s"})
    live.start()
    yield live
    live.stop()
    assert "Traceback" not in live.log_text(), live.log_text()[-4000:]


def sparse_gguf(path: Path, header_from: Path, size: int = 1 << 40) -> Path:
    """A valid GGUF followed by ``size`` bytes of holes (takes no disk)."""
    path.write_bytes(header_from.read_bytes())
    with open(path, "r+b") as f:
        f.truncate(size)
    return path


def cli(daemon: LiveDaemon, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LOCALRUN_HOST=daemon.url.removeprefix("http://"), LOCALRUN_MODELS=str(daemon.models_dir),
               NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "localrun", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def send_and_keep_open(daemon: LiveDaemon, route: str, body: dict[str, object]) -> socket.socket:
    """POST ``body`` on a raw connection and return it unread: closing it is the client going away."""
    payload = json.dumps(body).encode()
    host, port = daemon.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(f"POST {route} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    return sock


def blobs(daemon: LiveDaemon) -> set[str]:
    return set(os.listdir(daemon.models_dir / "blobs"))


def temp_files(daemon: LiveDaemon) -> list[str]:
    return [n for n in blobs(daemon) if n.startswith(".tmp-") or n.endswith("-partial")]


# -- 1. no file oracle -------------------------------------------------------------------------------


def test_a_path_on_the_daemons_machine_gets_one_answer_whatever_is_there(
        daemon: LiveDaemon, base: Path, tiny_gguf: Path) -> None:
    fifo = base / "fifo"
    os.mkfifo(fifo)
    sources = {
        "a valid GGUF": str(tiny_gguf),
        "a text file": "/etc/passwd",
        "nothing": "/etc/nope",
        "a directory": "/",
        "a device": "/dev/zero",
        "a FIFO": str(fifo),
        "a 1 TB sparse GGUF": str(sparse_gguf(base / "huge.gguf", tiny_gguf)),
        "a relative path": "../../../../etc/passwd",
        "a relative GGUF that exists": "tiny.gguf",
    }
    before = blobs(daemon)
    answers: dict[tuple[str, str], tuple[int, str]] = {}
    for what, source in sources.items():
        bodies = {
            "from": {"from": source},
            "FROM": {"modelfile": f"FROM {source}\n", "path": str(tiny_gguf.parent / "Modelfile")},
            "ADAPTER": {"modelfile": f"FROM tiny\nADAPTER {source}\n"},
        }
        for form, body in bodies.items():
            r = httpx.post(daemon.url + "/api/create", json={"model": "probe", "stream": False, **body}, timeout=30)
            keyword = "ADAPTER" if form == "ADAPTER" else "FROM"
            answers[(what, form)] = (r.status_code, r.text.replace(f"{keyword} {source}:", f"{keyword} <path>:"))
    for form in ("from", "FROM", "ADAPTER"):
        distinct = {answers[(what, form)] for what in sources}
        assert len(distinct) == 1, {what: answers[(what, form)] for what in sources}
        status, text = distinct.pop()
        assert status == 400 and "cannot name a file on the daemon's machine" in text, text
    assert blobs(daemon) == before
    assert httpx.post(daemon.url + "/api/show", json={"model": "probe"}, timeout=10).status_code == 404


# -- 1. what users do still works ---------------------------------------------------------------------


def test_localrun_create_uploads_local_files_once_and_skips_them_after(daemon: LiveDaemon, base: Path,
                                                                       tiny_gguf_b: Path) -> None:
    folder = base / "project"
    (folder / "weights").mkdir(parents=True)
    local = folder / "weights" / "model.gguf"
    local.write_bytes(tiny_gguf_b.read_bytes())
    lora = write_tiny_gguf(folder / "weights" / "lora.gguf", seed=5, name="lora")
    (folder / "Modelfile").write_text(
        "FROM ./weights/model.gguf\nADAPTER weights/lora.gguf\nPARAMETER temperature 0.2\n")
    first = cli(daemon, "create", "mine", "-f", "Modelfile", cwd=folder)
    assert first.returncode == 0, first.stderr
    assert "uploading" in first.stderr
    digest = hashlib.sha256(local.read_bytes()).hexdigest()
    assert f"sha256-{digest}" in blobs(daemon)
    assert f"sha256-{hashlib.sha256(lora.read_bytes()).hexdigest()}" in blobs(daemon)
    again = cli(daemon, "create", "mine-too", "-f", "Modelfile", cwd=folder)
    assert again.returncode == 0, again.stderr
    assert "uploading" not in again.stderr  # the daemon said (HEAD) it holds both blobs
    shown = httpx.post(daemon.url + "/api/show", json={"model": "mine"}, timeout=10).json()
    assert shown["details"]["family"] == "llama" and "temperature" in shown["parameters"]
    # `show --modelfile` output names the blob by its path in the store: it builds again, unhashed
    (folder / "Shown").write_text(shown["modelfile"])
    shown_again = cli(daemon, "create", "from-shown", "-f", "Shown", cwd=folder)
    assert shown_again.returncode == 0, shown_again.stderr
    assert "hashing" not in shown_again.stderr and "uploading" not in shown_again.stderr


def test_the_ollama_client_creates_from_uploaded_blobs(daemon: LiveDaemon, tiny_gguf: Path) -> None:
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=daemon.url)
    digest = client.create_blob(tiny_gguf)
    client.create(model="via-ollama", files={"tiny.gguf": digest}, parameters={"temperature": 0.1},
                  system="Be brief.")
    assert "Be brief." in (client.show("via-ollama").modelfile or "")
    assert "via-ollama:latest" in {m.model for m in client.list().models}


def test_a_digest_the_daemon_lacks_is_named_not_probed(daemon: LiveDaemon) -> None:
    missing = "sha256:" + "ab" * 32
    for modelfile in (f"FROM {missing}\n", f"FROM @{missing}\n", f"FROM tiny\nADAPTER {missing}\n"):
        r = httpx.post(daemon.url + "/api/create", json={"model": "x", "modelfile": modelfile, "stream": False},
                       timeout=30)
        assert r.status_code == 400 and "not in the store" in r.json()["error"], r.text


# -- 4. no work for nobody ------------------------------------------------------------------------------


def test_a_huge_sparse_gguf_is_refused_before_anything_hashes_it(daemon: LiveDaemon, base: Path,
                                                                  tiny_gguf: Path) -> None:
    folder = base / "sparse"
    folder.mkdir()
    sparse_gguf(folder / "huge.gguf", tiny_gguf)
    (folder / "Modelfile").write_text("FROM ./huge.gguf\n")
    before = blobs(daemon)
    started = time.monotonic()
    r = cli(daemon, "create", "huge", "-f", "Modelfile", cwd=folder)
    assert r.returncode == 1
    assert "header accounts for only" in r.stderr, r.stderr
    assert "hashing" not in r.stderr and "uploading" not in r.stderr
    assert time.monotonic() - started < 60  # hashing 1 TB would take hours
    assert blobs(daemon) == before


def test_an_upload_whose_client_goes_away_leaves_nothing_behind(daemon: LiveDaemon) -> None:
    digest = "sha256:" + "cd" * 32

    def body() -> Iterator[bytes]:
        for _ in range(8):
            yield bytes(1 << 20)
        time.sleep(0.5)
        raise ConnectionAbortedError("the client goes away mid-upload")

    with pytest.raises((ConnectionAbortedError, httpx.HTTPError)):
        httpx.post(daemon.url + f"/api/blobs/{digest}", content=body(), timeout=30)
    deadline = time.monotonic() + 15
    while temp_files(daemon) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not temp_files(daemon)
    assert httpx.head(daemon.url + f"/api/blobs/{digest}", timeout=10).status_code == 404


@pytest.mark.parametrize("route", ["/api/pull", "/api/create"])
def test_a_download_whose_client_goes_away_stops_and_resumes_later(daemon: LiveDaemon, hub: FakeHub,
                                                                    route: str) -> None:
    name = f"hf.co/{REPO}"
    body = {"model": name} if route == "/api/pull" else {"model": "from-hub", "from": name}
    hub.trickle = 0.01  # a hundred bytes a second: the download cannot finish while the client waits
    try:
        start = hub.body_bytes_sent
        hang_up = send_and_keep_open(daemon, route, {**body, "stream": False})
        deadline = time.monotonic() + 30
        while hub.body_bytes_sent - start < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hub.body_bytes_sent - start >= 50, "the download never started"
        hang_up.close()
        time.sleep(3)
        sent = hub.body_bytes_sent
        time.sleep(2)
        assert hub.body_bytes_sent - sent <= 2, "the daemon goes on downloading for nobody"
        assert any(n.endswith("-partial") for n in blobs(daemon))  # what a resume can use is kept
    finally:
        hub.trickle = None
    r = httpx.post(daemon.url + route, json={**body, "stream": False}, timeout=120)
    assert r.status_code == 200, r.text
    ranges = [x for x in hub.downloads(FILE) if x]
    assert ranges and re.match(r"bytes=[1-9]\d*-", ranges[-1]), hub.downloads(FILE)  # resumed, not restarted
    if route == "/api/pull":  # the second run finds the blob stored: remove the model for the next case
        assert httpx.request("DELETE", daemon.url + "/api/delete", json={"model": name}, timeout=10).status_code == 200
        for n in blobs(daemon):
            if n.startswith("sha256-") and (daemon.models_dir / "blobs" / n).stat().st_size == len(
                    hub.files[REPO][FILE]):
                (daemon.models_dir / "blobs" / n).unlink()
