"""Faults: a daemon killed mid-pull, a runner killed mid-stream, a full disk, a corrupt blob, two pulls at once.

Each test drives a real ``localrun serve`` (and real ``localrun pull`` processes) against the
stand-in hub of tests/fakehub.py, slowed down here so that a kill lands in the middle of a
download. What a user would notice is asserted: the pull resumes instead of starting over and the
result verifies; a client whose model crashed gets an error, not a hang, and the next request works;
a full disk is a clear error that leaves no corrupt blob and a consistent store; a corrupt blob is
refused at load with a hint to pull again; two simultaneous pulls download once and both succeed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakehub import FakeHub, _Handler
from hardening_helpers import LiveDaemon, add_model, free_port, ndjson, record_figures, runner_env
from tinymodel import write_tiny_gguf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

REPO = "hardening/big-GGUF"
FILENAME = "big-Q4_K_M.gguf"
MODEL = f"hf.co/{REPO}:Q4_K_M"


class _Throttled:
    """A socket file that sends at most ``rate`` bytes per second (so a pull takes a while)."""

    def __init__(self, raw: Any, rate: float) -> None:
        self.raw, self.rate = raw, rate

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        for i in range(0, len(view), 64 * 1024):
            piece = view[i:i + 64 * 1024]
            self.raw.write(piece)
            self.raw.flush()
            time.sleep(len(piece) / self.rate)
        return len(data)

    def flush(self) -> None:
        self.raw.flush()


class SlowHub(FakeHub):
    """tests/fakehub.FakeHub whose file downloads are throttled to ``rate`` bytes per second."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        self.rate = rate

    def handler_base(self) -> type[_Handler]:
        hub = self

        class Handler(_Handler):
            def _send_file(self, filename: str, data: bytes, head: bool) -> None:
                real = self.wfile
                self.wfile = _Throttled(real, hub.rate)  # type: ignore[assignment]
                try:
                    super()._send_file(filename, data, head)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed: that is the point
                finally:
                    self.wfile = real

            def handle_one_request(self) -> None:
                try:
                    super().handle_one_request()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

        return Handler


@pytest.fixture(scope="module")
def big_gguf(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real (loadable) GGUF of about 10 MB: big enough to kill a pull in the middle of it."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("big") / FILENAME, n_embd=256, n_ff=1024, n_layer=3,
                           n_head=4, n_head_kv=2, seed=7, name="big")
    return path.read_bytes()


def _daemon(base: Path, hub: FakeHub, **env: str) -> LiveDaemon:
    return LiveDaemon(base / "models", base / "daemon.log", env={"HF_ENDPOINT": hub.url, **env})


def _blob_names(models: Path) -> set[str]:
    blobs = models / "blobs"
    return set(os.listdir(blobs)) if blobs.is_dir() else set()


# -- SIGKILL during a pull -------------------------------------------------------------------


def test_a_daemon_killed_mid_pull_resumes_and_verifies(tmp_path: Path, big_gguf: bytes) -> None:
    sha = hashlib.sha256(big_gguf).hexdigest()
    with SlowHub(rate=4 * 1024 * 1024) as hub:
        hub.add_file(REPO, FILENAME, big_gguf)
        daemon = _daemon(tmp_path, hub).start()
        seen = 0
        try:
            with httpx.stream("POST", daemon.url + "/api/pull", json={"model": MODEL}, timeout=60) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    report = json.loads(line)
                    assert "error" not in report, report
                    seen = int(report.get("completed") or 0)
                    if report.get("status") == "downloading" and seen >= len(big_gguf) // 4:
                        daemon.kill()  # SIGKILL: no cleanup, no chance to say goodbye
                        break
        except httpx.HTTPError:
            pass  # the connection died with the daemon
        finally:
            daemon.kill()
            daemon.stop()
        assert 0 < seen < len(big_gguf), "the kill did not land mid-download"
        partial = tmp_path / "models" / "blobs" / f"sha256-{sha}-partial"
        assert partial.exists() and 0 < partial.stat().st_size < len(big_gguf)
        assert f"sha256-{sha}" not in _blob_names(tmp_path / "models"), "a blob appeared before it was verified"

        daemon = _daemon(tmp_path, hub).start()
        try:
            tags = httpx.get(daemon.url + "/api/tags", timeout=10).json()["models"]
            assert tags == [], "a half-pulled model must not be listed"
            had = partial.stat().st_size
            r = httpx.post(daemon.url + "/api/pull", json={"model": MODEL}, timeout=120)
            lines = ndjson(r.text)
            assert r.status_code == 200 and lines[-1] == {"status": "success"}, lines[-3:]
            ranges = hub.downloads(FILENAME)
            assert ranges[0] is None and ranges[-1] is not None and ranges[-1].startswith("bytes=")
            resumed_at = int(ranges[-1][len("bytes="):].split("-")[0])
            assert resumed_at >= had > 0, f"restarted from {resumed_at}, had {had} bytes"
            blob = tmp_path / "models" / "blobs" / f"sha256-{sha}"
            assert hashlib.sha256(blob.read_bytes()).hexdigest() == sha
            assert not partial.exists()
            r = httpx.post(daemon.url + "/api/generate", timeout=120, json={
                "model": MODEL, "prompt": "hello", "stream": False, "options": {"num_predict": 4}})
            assert r.status_code == 200, r.text
        finally:
            daemon.stop()
        record_figures("kill_daemon_mid_pull", file_bytes=len(big_gguf), killed_at_bytes=seen,
                       resumed_from_bytes=resumed_at, hub_bytes_sent=hub.body_bytes_sent,
                       verified=True)


# -- a runner killed mid-stream --------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_daemon(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[LiveDaemon]:
    base = tmp_path_factory.mktemp("runnerkill")
    add_model(base / "models", "tiny", tiny_gguf)
    daemon = LiveDaemon(base / "models", base / "daemon.log", env={"LOCALRUN_KEEP_ALIVE": "5m"}).start()
    yield daemon
    daemon.stop()


def _runner_pid(daemon: LiveDaemon) -> int:
    models = httpx.get(daemon.url + "/api/ps", timeout=10).json()["models"]
    assert models, "no model loaded"
    return int(models[0]["pid"])


def _stream_and_kill_runner(daemon: LiveDaemon, url: str, body: dict[str, Any]) -> list[str]:
    """Stream ``body``, SIGKILL the model's runner after the first line, return every line."""
    events: list[str] = []
    with httpx.stream("POST", daemon.url + url, json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for line in lines:
            if line.strip():
                events.append(line)
                break
        os.kill(_runner_pid(daemon), signal.SIGKILL)
        events.extend(line for line in lines if line.strip())  # must end, not hang
    return events


def _stream_error(api: str, events: list[str]) -> str | None:
    """The error the stream ended with, or None when it finished normally before the kill landed."""
    if api == "ollama":
        last = json.loads(events[-1])
        return str(last["error"]) if "error" in last else None
    assert events[-1] == "data: [DONE]"
    last = json.loads(events[-2][len("data: "):])
    return str(last["error"]["message"]) if "error" in last else None


@pytest.mark.parametrize("api", ["ollama", "openai"])
def test_a_runner_killed_mid_stream_gives_an_error_event_and_the_daemon_goes_on(
    tiny_daemon: LiveDaemon, api: str
) -> None:
    # The tiny model writes thousands of tokens a second and may sample an end-of-generation token
    # early, so on a fast machine a stream can finish before the kill lands. Seeds 7, 9, 6 and 1
    # give long generations on the tiny model; one stream cut by the kill is what is asserted.
    error = None
    for seed in (7, 9, 6, 1):
        if api == "ollama":
            url, body = "/api/generate", {"model": "tiny", "prompt": "tell me everything",
                                          "options": {"num_predict": 100000, "temperature": 1.0, "seed": seed}}
        else:
            url, body = "/v1/chat/completions", {"model": "tiny", "stream": True, "max_tokens": 100000,
                                                 "temperature": 1.0, "seed": seed,
                                                 "messages": [{"role": "user", "content": "tell me everything"}]}
        events = _stream_and_kill_runner(tiny_daemon, url, body)
        error = _stream_error(api, events)
        if error is not None:
            break
    assert error is not None, "every stream finished before the runner was killed"
    assert "runner" in error, error
    if api == "ollama":
        assert "SIGKILL" in error, error
    r = httpx.post(tiny_daemon.url + "/api/generate", timeout=120, json={
        "model": "tiny", "prompt": "hello again", "stream": False, "options": {"num_predict": 3}})
    assert r.status_code == 200 and r.json()["done"] is True
    record_figures(f"kill_runner_mid_stream_{api}", events_before_error=len(events) - 1, next_request=r.status_code)


# -- disk full -------------------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB tmpfs (as root); skips where mounting is not allowed."""
    mount = tmp_path / "smallfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _store_consistent(models: Path) -> None:
    from localrun.store import ModelStore

    store = ModelStore(models)
    for entry in store.list():
        store.verify(entry.name)
    for name in _blob_names(models):
        if name.startswith("sha256-") and not name.endswith(("-partial", ".lock")):
            data = (models / "blobs" / name).read_bytes()
            assert "sha256-" + hashlib.sha256(data).hexdigest() == name, f"corrupt blob {name} left in the store"


@pytest.mark.allow_5xx(reason="a 500: the disk fills on purpose during the pull")
def test_disk_full_during_a_pull_is_a_clear_error_and_leaves_the_store_consistent(
    small_fs: Path, tmp_path: Path, big_gguf: bytes, tiny_gguf: Path
) -> None:
    models = small_fs / "models"
    add_model(models, "tiny", tiny_gguf)  # something already in the store must survive
    with SlowHub(rate=64 * 1024 * 1024) as hub:
        hub.add_file(REPO, FILENAME, big_gguf)
        daemon = LiveDaemon(models, tmp_path / "daemon.log", env={"HF_ENDPOINT": hub.url}).start()
        try:
            r = httpx.post(daemon.url + "/api/pull", json={"model": MODEL}, timeout=120)
            last = ndjson(r.text)[-1] if r.status_code == 200 else r.json()
            message = last.get("error", "")
            assert message and ("space" in message.lower()), f"not a clear disk-full error: {last}"
            r = httpx.post(daemon.url + "/api/pull", json={"model": MODEL, "stream": False}, timeout=120)
            assert 400 <= r.status_code < 600 and "space" in r.json()["error"].lower()
            assert [m["name"] for m in httpx.get(daemon.url + "/api/tags").json()["models"]] == ["tiny:latest"]
            assert httpx.get(daemon.url + "/health").status_code == 200
            r = httpx.post(daemon.url + "/api/generate", timeout=120, json={
                "model": "tiny", "prompt": "still fine", "stream": False, "options": {"num_predict": 2}})
            assert r.status_code == 200
        finally:
            daemon.stop()
    _store_consistent(models)
    record_figures("disk_full_during_pull", fs_bytes=6 * 1024 * 1024, file_bytes=len(big_gguf),
                   error=message[:120], store_consistent=True)


def test_a_write_error_mid_download_is_a_clear_error_in_process(
    tmp_path: Path, big_gguf: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same fault through a write hook (no mount needed): ENOSPC after 1 MiB of the file."""
    import builtins

    from localrun.errors import LocalrunError
    from localrun.store import ModelStore, pull
    from localrun.store import hfdownload as hf_module  # the module that writes the partial file

    real_open = builtins.open

    class FullDisk:
        def __init__(self, f: Any) -> None:
            self.f, self.written = f, 0

        def write(self, data: bytes) -> int:
            if self.written + len(data) > 1024 * 1024:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return int(self.f.write(data))

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

    def hooked_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(file, mode, *args, **kwargs)
        return FullDisk(f) if str(file).endswith("-partial") and "b" in mode and ("a" in mode or "w" in mode) else f

    monkeypatch.setattr(hf_module, "open", hooked_open, raising=False)
    with SlowHub(rate=64 * 1024 * 1024) as hub:
        hub.add_file(REPO, FILENAME, big_gguf)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        store = ModelStore(tmp_path / "models")
        with pytest.raises(LocalrunError) as info:
            pull(store, MODEL)
        assert "space" in str(info.value).lower()
        assert store.list() == []
        _store_consistent(tmp_path / "models")
        monkeypatch.setattr(hf_module, "open", real_open, raising=False)
        entry = pull(store, MODEL)  # space is back: the pull resumes and verifies
        assert str(entry.name).startswith("hf.co/")
        store.verify(str(entry.name))


# -- a corrupt blob --------------------------------------------------------------------------


@pytest.mark.allow_5xx(reason="500s: the test corrupts a blob in the store on purpose")
@pytest.mark.parametrize("how", ["rewritten", "truncated", pytest.param("bit-rot", marks=pytest.mark.xfail(
    reason="known limitation: a blob verified once is re-hashed only when its size, mtime or inode change "
           "(hashing GBs at every load is too slow); silent in-place corruption is caught by a full "
           "re-hash (ModelStore.verify), not at load", strict=True))])
def test_a_corrupt_blob_is_refused_at_load_with_a_hint_to_pull_again(
    tmp_path: Path, tiny_gguf: Path, tiny_gguf_b: Path, how: str
) -> None:
    import shutil

    from localrun.store import ModelStore

    models = tmp_path / "models"
    # A private copy: the store hard-links imports, and the shared fixture file must stay intact.
    victim = Path(shutil.copyfile(tiny_gguf_b, tmp_path / "victim.gguf"))
    add_model(models, "victim", victim)
    add_model(models, "bystander", tiny_gguf)
    blob = Path(ModelStore(models).resolve("victim").model_path)
    assert blob.parent == models / "blobs"
    data = bytearray(blob.read_bytes())
    if how == "bit-rot":  # same inode, size and mtime: what a failing disk does
        st = blob.stat()
        with open(blob, "r+b") as f:
            f.seek(len(data) // 2)
            f.write(bytes(64))
        os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        blob.unlink()  # break the hard link to victim.gguf before writing
    if how == "rewritten":
        middle = len(data) // 2
        data[middle:middle + 64] = bytes(64)  # zeroed weights: still a valid-looking GGUF
        blob.write_bytes(bytes(data))
    elif how == "truncated":
        blob.write_bytes(bytes(data[: len(data) // 3]))
    with LiveDaemon(models, tmp_path / "daemon.log") as daemon:
        for url, body in [("/api/generate", {"model": "victim", "prompt": "hi", "stream": False}),
                          ("/api/chat", {"model": "victim", "messages": [{"role": "user", "content": "hi"}]}),
                          ("/v1/chat/completions", {"model": "victim",
                                                    "messages": [{"role": "user", "content": "hi"}]})]:
            r = httpx.post(daemon.url + url, json=body, timeout=60)
            assert r.status_code >= 400, f"{url} served a corrupt model: {r.text[:200]}"
            error = r.json()["error"]
            message = error["message"] if isinstance(error, dict) else error
            assert "corrupt" in message.lower() and "pull" in message.lower(), message
        assert httpx.get(daemon.url + "/api/ps").json()["models"] == [], "the corrupt model was loaded"
        r = httpx.post(daemon.url + "/api/generate", timeout=120, json={
            "model": "bystander", "prompt": "hi", "stream": False, "options": {"num_predict": 2}})
        assert r.status_code == 200
    record_figures(f"corrupt_blob_{how}", detected=True, message=message[:160])


# -- two pulls at once -----------------------------------------------------------------------


def test_two_processes_pulling_the_same_model_download_it_once(tmp_path: Path, big_gguf: bytes) -> None:
    sha = hashlib.sha256(big_gguf).hexdigest()
    models = tmp_path / "models"
    with SlowHub(rate=4 * 1024 * 1024) as hub:
        hub.add_file(REPO, FILENAME, big_gguf)
        daemon = LiveDaemon(models, tmp_path / "daemon.log", env={"HF_ENDPOINT": hub.url}).start()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCALRUN_")}
        env.update({"LOCALRUN_MODELS": str(models), "HF_ENDPOINT": hub.url,
                    # no daemon here: this CLI works on the store directly, a second process beside the daemon
                    "LOCALRUN_HOST": f"127.0.0.1:{free_port()}", **runner_env()})
        try:
            cli = subprocess.Popen([sys.executable, "-m", "localrun", "pull", MODEL], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 60
            while not hub.downloads(FILENAME) and cli.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)  # the CLI is downloading now: the daemon's pull must overlap it
            assert hub.downloads(FILENAME), "the CLI never started its download"
            r = httpx.post(daemon.url + "/api/pull", json={"model": MODEL, "stream": False}, timeout=120)
            out, _ = cli.communicate(timeout=120)
            assert cli.returncode == 0, out.decode()[-2000:]
            assert r.status_code == 200, r.text
            names = [m["name"] for m in httpx.get(daemon.url + "/api/tags").json()["models"]]
            assert names == [MODEL] or names == [MODEL.lower()] or len(names) == 1, names
        finally:
            daemon.stop()
    full_gets = [rng for rng in hub.downloads(FILENAME) if rng is None]
    assert len(full_gets) == 1, f"downloaded {len(full_gets)} times: {hub.downloads(FILENAME)}"
    assert hub.body_bytes_sent == len(big_gguf), f"{hub.body_bytes_sent} bytes sent for a {len(big_gguf)}-byte file"
    blob = models / "blobs" / f"sha256-{sha}"
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == sha
    record_figures("two_pulls_at_once", file_bytes=len(big_gguf), hub_bytes_sent=hub.body_bytes_sent,
                   downloads=len(full_gets), both_succeeded=True)
