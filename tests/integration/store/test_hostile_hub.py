"""A hostile or broken hub (a stand-in on 127.0.0.1) cannot exhaust memory, hang a pull or wedge its lock.

The shapes are issue #13's: a 1 MB gzip listing inflating to 1 GB (+2.9 GB daemon RSS), a listing that
never ends, size fields of "abc", 0 or -1 (a 500), a hub that advertises more bytes than it sends or
ignores ``Range`` (231 GETs in 25 s and a later pull hanging on the lock), a hub trickling a byte every
2 s (a thread held with no deadline). Each ends in a PullError (HTTP 502 in the daemon) naming the
hub's fault, in bounded time, with the lock released and nothing wrong stored.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from fakehub import FakeHub

from localrun.errors import LocalrunError, ModelNotFound, PullError
from localrun.store import ModelStore, Progress, hfdownload, pull

REPO = "evil-org/Tiny-GGUF"
FILE = "tiny-Q4_K_M.gguf"


@pytest.fixture
def hub(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub() as h:
        h.add_file(REPO, FILE, tiny_gguf.read_bytes())
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """About 1 MB of gzip that inflates to 1 GB of zeros."""
    out = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 24)
    parts = [out.compress(block) for _ in range(64)]
    return b"".join(parts) + out.flush()


def _nothing_stored(store: ModelStore) -> None:
    assert store.list() == []
    leftovers = [p.name for p in store.blobs.dir.iterdir()] if store.blobs.dir.exists() else []
    assert all(n.endswith((".lock", "-partial")) for n in leftovers), leftovers


def test_a_gzip_bomb_listing_is_refused_without_inflating_it(store: ModelStore, hub: FakeHub,
                                                             gzip_bomb: bytes) -> None:
    assert len(gzip_bomb) < 2 << 20
    hub.listing_answer = (200, {"Content-Encoding": "gzip"}, gzip_bomb)
    before = psutil.Process().memory_info().rss
    with pytest.raises(PullError, match="inflates to more than"):
        pull(store, f"hf.co/{REPO}")
    assert psutil.Process().memory_info().rss - before < 64 << 20  # was +2.9 GB
    _nothing_stored(store)


def test_a_listing_that_never_ends_is_cut_off(store: ModelStore, hub: FakeHub) -> None:
    hub.endless_listing = True
    started = time.monotonic()
    with pytest.raises(PullError, match="longer than"):
        pull(store, f"hf.co/{REPO}")
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("size", ["abc", 0, -1, None, 2**70, True])
def test_malformed_size_fields_are_a_hub_error(store: ModelStore, hub: FakeHub, size: Any) -> None:
    hub.advertise_size[FILE] = size
    with pytest.raises(PullError, match="malformed") as info:
        pull(store, f"hf.co/{REPO}")
    assert info.value.status == 502
    _nothing_stored(store)


@pytest.mark.parametrize(("status", "body", "expected"), [
    (403, {"error": "Access to model evil-org/Tiny-GGUF is restricted"}, r"403.*restricted"),
    (500, {"error": "Internal Error - We're working hard to fix this"}, r"500.*working hard"),
    (429, {"error": "rate limited"}, r"429.*rate limited"),
])
def test_hub_failures_are_502_with_the_hubs_reason(store: ModelStore, hub: FakeHub, status: int,
                                                   body: dict[str, str], expected: str) -> None:
    hub.listing_answer = (status, {}, json.dumps(body).encode())
    with pytest.raises(PullError, match=expected) as info:
        pull(store, f"hf.co/{REPO}")
    assert info.value.status == 502


def test_a_listing_that_is_not_json_or_has_a_bad_commit(store: ModelStore, hub: FakeHub) -> None:
    hub.listing_answer = (200, {}, b"<html>hello</html>")
    with pytest.raises(PullError, match="not valid JSON"):
        pull(store, f"hf.co/{REPO}")
    hub.listing_answer = (200, {}, json.dumps({"sha": "../../etc", "siblings": []}).encode())
    with pytest.raises(PullError, match="commit id"):
        pull(store, f"hf.co/{REPO}")
    hub.listing_answer = (200, {"Content-Encoding": "gzip"}, gzip.compress(json.dumps([1] * 10).encode()))
    with pytest.raises(PullError, match="not a JSON object"):
        pull(store, f"hf.co/{REPO}")


def test_a_hub_that_advertises_more_bytes_than_it_sends(store: ModelStore, hub: FakeHub, tiny_gguf: Path) -> None:
    hub.advertise_size[FILE] = tiny_gguf.stat().st_size + 1000
    started = time.monotonic()
    with pytest.raises(PullError, match="serves"):
        pull(store, f"hf.co/{REPO}")
    assert len(hub.downloads(FILE)) <= 3  # was 231 GETs in 25 s, still going
    assert time.monotonic() - started < 30
    # The lock is free: the same pull fails the same way at once instead of hanging on it.
    with pytest.raises(PullError):
        pull(store, f"hf.co/{REPO}")


def test_a_hub_that_ignores_range_and_cuts_every_transfer(store: ModelStore, hub: FakeHub, tiny_gguf: Path) -> None:
    hub.ignore_range = True
    hub.cut_after[FILE] = [tiny_gguf.stat().st_size // 2] * 1000
    with pytest.raises(PullError, match="interrupted"):
        pull(store, f"hf.co/{REPO}")
    assert len(hub.downloads(FILE)) <= hfdownload.MAX_RETRIES + 2


def test_a_trickling_hub_is_given_up_and_the_lock_released(store: ModelStore, hub: FakeHub, tiny_gguf: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hfdownload, "LOW_SPEED_SECONDS", 1.0)
    monkeypatch.setattr(hfdownload, "MAX_RETRIES", 1)
    hub.trickle = 0.05  # 20 bytes a second
    started = time.monotonic()
    with pytest.raises(PullError, match="less than"):
        pull(store, f"hf.co/{REPO}")
    assert time.monotonic() - started < 30
    hub.trickle = None
    entry = pull(store, f"hf.co/{REPO}")  # resumes from what trickled in, under the same lock
    assert store.resolve(entry.name).model_path.read_bytes() == tiny_gguf.read_bytes()


def test_every_pull_has_a_deadline(store: ModelStore, hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALRUN_PULL_TIMEOUT", "2s")
    monkeypatch.setattr(hfdownload, "LOW_SPEED_BYTES", 1)  # fast enough for the low-speed check
    hub.trickle = 0.01
    started = time.monotonic()
    with pytest.raises(PullError, match="LOCALRUN_PULL_TIMEOUT"):
        pull(store, f"hf.co/{REPO}")
    assert time.monotonic() - started < 20


class ClientGone(LocalrunError):
    pass


def test_a_pull_stops_when_its_client_goes_away_and_frees_the_lock(store: ModelStore, hub: FakeHub) -> None:
    hub.trickle = 0.01
    seen: list[Progress] = []

    def progress(p: Progress) -> None:
        seen.append(p)
        if p.status == "downloading" and (p.completed or 0) > 20:
            raise ClientGone("the client went away")

    with pytest.raises(ClientGone):
        pull(store, f"hf.co/{REPO}", progress=progress)
    sent = hub.body_bytes_sent
    time.sleep(0.5)
    assert hub.body_bytes_sent - sent <= 2  # nothing keeps downloading in the background
    hub.trickle = None
    done = threading.Event()
    threading.Thread(target=lambda: (pull(store, f"hf.co/{REPO}"), done.set()), daemon=True).start()
    assert done.wait(30), "the second pull hung on the first one's lock"


def test_a_missing_repo_is_still_a_404(store: ModelStore, hub: FakeHub) -> None:
    with pytest.raises(ModelNotFound):
        pull(store, "hf.co/nobody/nothing")
