"""The store never serves a blob that does not match its digest (issue #13, point 6).

Before: after bit rot, creating the model again from the original file answered 200 and kept the
rotten blob (publishing kept an existing same-size file and marked it verified without hashing it);
re-uploading the right bytes replaced nothing; a SIGKILLed create left gigabytes of ``.tmp-*`` files
for ever; hashing a huge file went on after its client had gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from storefixtures import rot

from localrun.errors import CorruptBlob, LocalrunError
from localrun.store import ModelStore, integrity
from localrun.store.blobs import BlobStore


@pytest.fixture
def copying(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import by copy (as across filesystems), so the stored blob is not the original's inode."""
    monkeypatch.setattr(BlobStore, "_link", staticmethod(lambda src, tmp: None))


def test_creating_again_from_the_original_repairs_a_rotten_blob(store: ModelStore, tiny_gguf: Path,
                                                                 tmp_path: Path, copying: None) -> None:
    store.create("m", f"FROM {tiny_gguf}\n")
    blob = store.resolve("m").model_path
    rot(blob)
    store.create("m", f"FROM {tiny_gguf}\n")  # was: 200, and the rotten bytes kept and marked verified
    assert store.resolve("m").model_path.read_bytes() == tiny_gguf.read_bytes()
    store.verify("m")


def test_uploading_the_right_bytes_again_replaces_a_rotten_blob(store: ModelStore, tiny_gguf: Path,
                                                                copying: None) -> None:
    store.create("m", f"FROM {tiny_gguf}\n")
    path = store.resolve("m").model_path
    rot(path)
    with store.blobs.writer() as w:
        w.write(tiny_gguf.read_bytes())
        w.commit(store.blobs.digest_of_blob_path(path))
    store.verify("m")


def test_verify_finds_bit_rot_and_repair_never_serves_it_again(store: ModelStore, tiny_gguf: Path,
                                                               copying: None) -> None:
    store.create("m", f"FROM {tiny_gguf}\n")
    store.resolve("m")  # verified once: the marker now matches size, inode and mtime
    rot(store.resolve("m").model_path)
    store.resolve("m")  # bit rot is invisible to the cheap check...
    checks = integrity.check(store)
    bad = [c for c in checks if c.problem]
    assert len(bad) == 1 and bad[0].models == ("m:latest",)  # ...and caught by the full one
    repaired = integrity.repair(store, checks)
    assert not any(c.repaired for c in repaired)
    assert "create m:latest again" in next(c.hint for c in repaired if c.problem)
    with pytest.raises(CorruptBlob, match="missing"):  # a clear error, never the wrong bytes
        store.resolve("m")
    store.create("m", f"FROM {tiny_gguf}\n")
    assert all(c.problem is None for c in integrity.check(store))


def test_orphaned_temp_files_are_removed_and_live_ones_kept(store: ModelStore) -> None:
    store.blobs.ensure_dirs()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    orphan = store.blobs.dir / f".tmp-{int(dead.stdout)}-abc"
    orphan.write_bytes(b"x" * 1000)
    mine = store.blobs.dir / f".tmp-{os.getpid()}-def"
    mine.write_bytes(b"y")
    partial = store.blobs.dir / ("sha256-" + "0" * 64 + "-partial")
    partial.write_bytes(b"resume me")
    assert store.remove_orphans() == 1000
    assert not orphan.exists() and mine.exists() and partial.exists()


class Gone(LocalrunError):
    pass


def test_hashing_stops_when_its_client_goes_away(store: ModelStore, tmp_path: Path) -> None:
    huge = tmp_path / "sparse.bin"
    with open(huge, "wb") as f:
        f.truncate(1 << 40)  # 1 TB of holes: hours of hashing if nothing stops it
    seen = []

    def progress(done: int) -> None:
        seen.append(done)
        if done >= 8 << 20:
            raise Gone("the client went away")

    with pytest.raises(Gone):
        store.blobs.import_file(huge, progress=progress)
    assert max(seen) == 8 << 20
    assert not [p for p in store.blobs.dir.iterdir() if p.name.startswith(".tmp-")]
