"""Content-addressed blobs: atomic, deduplicated, verified, linked in without a second copy."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from pathlib import Path

import pytest

from localrun.errors import CorruptBlob, StoreError
from localrun.store.blobs import BlobStore, normalize_digest


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_write_read_and_dedupe(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    d1 = blobs.write_bytes(b"hello")
    d2 = blobs.write_bytes(b"hello")
    assert d1 == d2 == _digest(b"hello")
    assert blobs.path(d1).name == "sha256-" + d1[7:]
    assert blobs.read_bytes(d1) == b"hello"
    assert list(blobs.digests()) == [d1]
    assert not [p for p in blobs.dir.iterdir() if p.name.startswith(".tmp-")]


def test_normalize_digest_forms() -> None:
    hexd = "ab" * 32
    assert normalize_digest(f"sha256-{hexd}") == normalize_digest(hexd) == f"sha256:{hexd}"
    with pytest.raises(StoreError):
        normalize_digest("sha256:../../etc/passwd")


def test_corrupt_blob_is_detected_and_never_read(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    d = blobs.write_bytes(b"original bytes")
    blobs.path(d).write_bytes(b"tampered bytes")
    with pytest.raises(CorruptBlob, match="corrupt"):
        blobs.read_bytes(d)
    with pytest.raises(CorruptBlob, match="corrupt"):
        blobs.verify(d)
    with pytest.raises(CorruptBlob):
        blobs.ensure_verified(d)


def test_ensure_verified_rehashes_only_changed_blobs(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    d = blobs.write_bytes(b"x" * 1000)
    blobs.ensure_verified(d)  # marker matches: no error
    path = blobs.path(d)
    with open(path, "r+b") as f:  # same size, different bytes, new mtime
        f.write(b"y")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    with pytest.raises(CorruptBlob):
        blobs.ensure_verified(d)


def test_writer_rejects_wrong_expected_digest_and_leaves_nothing(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    with blobs.writer() as w:
        w.write(b"abc")
        with pytest.raises(CorruptBlob):
            w.commit(_digest(b"xyz"))
    assert list(blobs.dir.iterdir()) == []


def test_import_file_does_not_keep_two_full_copies(tmp_path: Path) -> None:
    src = tmp_path / "model.gguf"
    src.write_bytes(os.urandom(100_000))
    blobs = BlobStore(tmp_path / "store")
    result = blobs.import_file(src)
    assert result.digest == _digest(src.read_bytes()) and result.new
    stored = blobs.path(result.digest)
    if result.method == "hard link":
        assert stored.stat().st_ino == src.stat().st_ino
    assert result.method in ("reflink", "hard link", "copy")
    assert not blobs.import_file(src).new  # the same bytes again: nothing new stored


def _write_same_blob(root: str, data: bytes, rounds: int) -> None:
    blobs = BlobStore(Path(root))
    for _ in range(rounds):
        with blobs.writer() as w:
            for i in range(0, len(data), 4096):
                w.write(data[i:i + 4096])
            w.commit()


def test_two_processes_writing_the_same_blob_at_once(tmp_path: Path) -> None:
    data = os.urandom(512 * 1024)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_same_blob, args=(str(tmp_path), data, 5)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    blobs = BlobStore(tmp_path)
    d = _digest(data)
    blobs.verify(d)
    assert sorted(p.name for p in blobs.dir.iterdir()) == [blobs.path(d).name]
