"""Content-addressed blobs: ``blobs/sha256-<hex>``, named by the sha256 of their bytes.

Contract:
- A blob file appears only by an atomic ``os.replace`` of a fully written, fsynced temp file in the
  same directory, after its bytes were hashed and matched the name. Two processes writing the same
  blob at once each write their own temp file; the last rename wins with identical bytes, and a
  reader never sees a half-written blob.
- Publishing bytes under a name that already exists *replaces* the stored file with the bytes just
  hashed (unless both are the same inode): a stored blob may have rotted since it was verified, and
  creating or uploading the model again must repair it, never keep it.
- Temp files are named ``.tmp-<pid>-...`` after the process writing them; :meth:`BlobStore.remove_orphans`
  deletes those whose process is gone (a SIGKILLed create left gigabytes of them), and the daemon
  calls it at start-up.
- Identical content is stored once (the name is the content).
- :meth:`BlobStore.verify` re-hashes a blob and raises CorruptBlob when the bytes do not match
  the name. To keep that affordable for multi-GB weights, a verified blob gets a small marker
  (size, mtime, inode) under ``verified/``; :meth:`ensure_verified` re-hashes only when the file
  changed since (e.g. someone edited a hard-linked original in place).
- Importing a local file tries a reflink (copy-on-write clone), then a hard link, then a copy,
  so a model created from a local GGUF does not keep two full copies where the filesystem allows.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import CorruptBlob, StoreError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: msvcrt byte-range locks instead
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

CHUNK = 1 << 20
_TMP_PREFIX = ".tmp-"
_DIGEST_RE = re.compile(r"sha256[:-]([0-9a-f]{64})")
_FICLONE = 0x40049409  # linux/fs.h: clone a whole file (reflink) on btrfs, xfs, ...

ProgressFn = Callable[[int], None]  # bytes processed so far


def normalize_digest(digest: str) -> str:
    """``sha256:<hex>`` from ``sha256:<hex>``, ``sha256-<hex>`` or a bare 64-hex string."""
    text = digest.strip().lower()
    if re.fullmatch(r"[0-9a-f]{64}", text):
        return f"sha256:{text}"
    m = _DIGEST_RE.fullmatch(text)
    if not m:
        raise StoreError(f"not a sha256 digest: {digest!r}")
    return f"sha256:{m.group(1)}"


def sha256_file(path: Path, progress: ProgressFn | None = None) -> str:
    """The digest of ``path``; ``progress(bytes so far)`` after every MiB (raising there stops the hashing)."""
    for done, digest in sha256_steps(path):
        if digest is not None:
            return digest
        if progress:
            progress(done)
    raise AssertionError("sha256_steps ends with the digest")


def sha256_steps(path: Path, every: int = CHUNK) -> Iterator[tuple[int, str | None]]:
    """Hash ``path``, yielding ``(bytes so far, None)`` about every ``every`` bytes and
    ``(size, "sha256:<hex>")`` last. Stopping the iteration stops the hashing."""
    h = hashlib.sha256()
    done = reported = 0
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
            done += len(block)
            if done - reported >= every:
                reported = done
                yield done, None
    yield done, f"sha256:{h.hexdigest()}"


def temp_file(directory: Path) -> tuple[int, Path]:
    """A new temp file in ``directory`` named after this process (see :meth:`BlobStore.remove_orphans`)."""
    fd, name = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-", dir=directory)
    return fd, Path(name)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class BlobImport:
    digest: str
    new: bool      # False when the store already held these bytes
    method: str    # "reflink", "hard link" or "copy"


class BlobWriter:
    """Write a blob by streaming bytes; :meth:`commit` verifies and publishes it atomically.

    Use as a context manager: leaving it without a commit removes the temp file.
    """

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        fd, self.tmp_path = temp_file(store.dir)
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    @property
    def digest(self) -> str:
        return f"sha256:{self._hash.hexdigest()}"

    def commit(self, expected: str | None = None) -> str:
        """Publish the blob; raises CorruptBlob (temp removed) when ``expected`` does not match."""
        digest = self.digest
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        if expected is not None and normalize_digest(expected) != digest:
            self.tmp_path.unlink(missing_ok=True)
            raise CorruptBlob(f"content has digest {digest}, expected {normalize_digest(expected)}")
        self._store._publish(self.tmp_path, digest)
        return digest

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        self.tmp_path.unlink(missing_ok=True)

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tmp_path.exists():
            self.abort()


class BlobStore:
    """The ``blobs/`` directory of a store. Safe for concurrent use by several processes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / "blobs"
        self._verified_dir = root / "verified"

    def ensure_dirs(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._verified_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the model store at {self.root}: {exc.strerror or exc}") from exc

    def path(self, digest: str) -> Path:
        return self.dir / normalize_digest(digest).replace(":", "-")

    def partial_path(self, digest: str) -> Path:
        """Where an interrupted download of ``digest`` keeps its bytes to resume from."""
        return self.dir / (normalize_digest(digest).replace(":", "-") + "-partial")

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def size(self, digest: str) -> int:
        try:
            return self.path(digest).stat().st_size
        except FileNotFoundError:
            raise CorruptBlob(f"blob {digest} is missing from the store") from None

    def digests(self) -> Iterator[str]:
        if not self.dir.is_dir():
            return
        for p in self.dir.iterdir():
            m = _DIGEST_RE.fullmatch(p.name)
            if m and p.is_file():
                yield f"sha256:{m.group(1)}"

    def writer(self) -> BlobWriter:
        self.ensure_dirs()
        return BlobWriter(self)

    def write_bytes(self, data: bytes) -> str:
        """Store small content (template, params...); returns its digest."""
        digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
        if self.has(digest) and self.read_bytes(digest, verify=False) == data:
            return digest
        with self.writer() as w:
            w.write(data)
            return w.commit(digest)

    def read_bytes(self, digest: str, *, verify: bool = True) -> bytes:
        """Read a small blob; raises CorruptBlob when missing or (``verify``) not matching its name."""
        try:
            data = self.path(digest).read_bytes()
        except FileNotFoundError:
            raise CorruptBlob(f"blob {digest} is missing from the store") from None
        if verify and f"sha256:{hashlib.sha256(data).hexdigest()}" != normalize_digest(digest):
            raise CorruptBlob(f"blob {digest} is corrupt: its bytes do not match its digest")
        return data

    def digest_of_blob_path(self, path: Path) -> str | None:
        """The digest when ``path`` is a blob of this store, else None."""
        try:
            if path.resolve().parent != self.dir.resolve():
                return None
        except OSError:
            return None
        m = _DIGEST_RE.fullmatch(path.name)
        return f"sha256:{m.group(1)}" if m else None

    def import_file(self, src: Path, progress: ProgressFn | None = None) -> BlobImport:
        """Add a local file by reflink, hard link or copy; says its digest and whether it was new.

        The file is linked into ``blobs/`` first and the linked inode is hashed, so the digest
        names exactly the bytes the store holds (a copy is hashed as it is written). ``progress``
        gets the bytes hashed so far; raising there stops the import and removes the temp file.
        """
        self.ensure_dirs()
        fd, tmp = temp_file(self.dir)
        os.close(fd)
        try:
            how = self._link(src, tmp)
            if how is None:
                how, digest = "copy", self._copy_hashing(src, tmp, progress)
            else:
                digest = sha256_file(tmp, progress)
            log.info("importing %s into the store by %s as %s", src, how, digest)
            new = self._publish(tmp, digest)
            return BlobImport(digest, new, how)
        finally:
            tmp.unlink(missing_ok=True)

    @staticmethod
    def _link(src: Path, tmp: Path) -> str | None:
        """Reflink or hard-link ``src`` to ``tmp``; None when neither works (copy it then)."""
        if fcntl is not None:
            try:
                with open(src, "rb") as fin, open(tmp, "wb") as fout:
                    fcntl.ioctl(fout.fileno(), _FICLONE, fin.fileno())
                return "reflink"
            except OSError:
                pass
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
            return "hard link"
        except OSError:
            return None

    @staticmethod
    def _copy_hashing(src: Path, tmp: Path, progress: ProgressFn | None) -> str:
        """Copy ``src`` to ``tmp`` and hash it in the same pass (one read of the source)."""
        h = hashlib.sha256()
        done = 0
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            while block := fin.read(CHUNK):
                fout.write(block)
                h.update(block)
                done += len(block)
                if progress:
                    progress(done)
            fout.flush()
            os.fsync(fout.fileno())
        return f"sha256:{h.hexdigest()}"

    def _publish(self, tmp: Path, digest: str) -> bool:
        """Rename ``tmp`` (already hashed to ``digest``) into place; True when the blob is new.

        An existing blob of that name is replaced, not kept: its bytes may have changed since they
        were verified (bit rot keeps size, inode and mtime), and ``tmp``'s were hashed just now.
        """
        final = self.path(digest)
        try:
            existing = final.stat()
        except FileNotFoundError:
            existing = None
        if existing is not None and os.path.samestat(existing, tmp.stat()):
            tmp.unlink(missing_ok=True)  # the same inode (a hard link of it): nothing to replace
        else:
            os.replace(tmp, final)
            _fsync_dir(self.dir)
        self.mark_verified(digest)
        return existing is None

    # -- verification ------------------------------------------------------------------

    def _marker(self, digest: str) -> Path:
        return self._verified_dir / self.path(digest).name

    def _stamp(self, digest: str) -> dict[str, int]:
        st = self.path(digest).stat()
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}

    def mark_verified(self, digest: str) -> None:
        with contextlib.suppress(OSError):
            self._verified_dir.mkdir(parents=True, exist_ok=True)
            marker = self._marker(digest)
            tmp = marker.with_name(marker.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self._stamp(digest)))
            os.replace(tmp, marker)

    def verify(self, digest: str, progress: ProgressFn | None = None) -> None:
        """Re-hash the blob; raises CorruptBlob when missing or not matching its name."""
        path = self.path(digest)
        if not path.is_file():
            raise CorruptBlob(f"blob {digest} is missing from the store")
        log.info("verifying %s (%d bytes)", path.name, path.stat().st_size)
        actual = sha256_file(path, progress)
        if actual != normalize_digest(digest):
            self._marker(digest).unlink(missing_ok=True)
            raise CorruptBlob(
                f"blob {path.name} is corrupt: its bytes hash to {actual}; remove the model and pull or create it again"
            )
        self.mark_verified(digest)

    def ensure_verified(self, digest: str) -> None:
        """Verify only if the blob changed since it was last verified (cheap when it did not)."""
        try:
            recorded = json.loads(self._marker(digest).read_text())
            if recorded == self._stamp(digest):
                return
        except (OSError, ValueError):
            pass
        self.verify(digest)

    def remove_orphans(self) -> int:
        """Delete temp files whose writing process is gone (killed mid-create); returns bytes freed.

        A temp file belongs to the process named in it (``.tmp-<pid>-...``); it is an orphan when
        that process no longer runs, or runs but started after the file was made (the pid was
        reused). Unnamed ones (older versions) count as orphans after a day. Partial downloads
        (``-partial``) are not temp files: the next pull resumes from them.
        """
        import psutil

        freed = 0
        for path in list(self.dir.glob(_TMP_PREFIX + "*")) + list(self._verified_dir.glob("*.tmp")):
            try:
                st = path.stat()
                if not _orphan(path.name, st.st_ctime, psutil):
                    continue
                path.unlink()
                freed += st.st_size
                log.info("removed the orphaned temp file %s (%d bytes)", path.name, st.st_size)
            except OSError:
                continue
        return freed

    def remove(self, digest: str) -> int:
        """Delete a blob (and its marker); returns the bytes freed (0 when it was absent)."""
        path = self.path(digest)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            size = 0
        self._marker(digest).unlink(missing_ok=True)
        return size


def _orphan(name: str, ctime: float, psutil: Any) -> bool:
    m = re.match(r"(?:\.tmp-|.*\.)(\d+)[-.]", name)
    if m is None:
        return time.time() - ctime > 86400
    pid = int(m.group(1))
    try:
        return bool(psutil.Process(pid).create_time() > ctime + 1.0)  # the pid was reused since
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


@contextlib.contextmanager
def file_lock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive advisory lock (fcntl) held for the ``with`` block; released however it ends.

    Without ``on_wait`` it blocks until free. With it, it polls twice a second and calls
    ``on_wait()`` while another holder has it: raising there (a deadline, a departed client) gives up.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while not _try_lock(fd, block=on_wait is None):
            assert on_wait is not None
            on_wait()
            time.sleep(_LOCK_POLL)
        yield
    finally:
        os.close(fd)


_LOCK_POLL = 0.5


def _try_lock(fd: int, block: bool) -> bool:
    while True:
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX if block else fcntl.LOCK_EX | fcntl.LOCK_NB)
            else:  # pragma: no cover - Windows
                import msvcrt

                msvcrt.locking(fd, msvcrt.LK_LOCK if block else msvcrt.LK_NBLCK, 1)
            return True
        except OSError as exc:
            if not block and exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, errno.EDEADLK):
                return False
            if exc.errno not in (errno.EINTR, errno.EDEADLK):  # EDEADLK: msvcrt gave up after 10 s
                raise
