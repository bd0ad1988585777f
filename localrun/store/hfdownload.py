"""Downloading one hub file into the store: resumable, verified, bounded.

The bytes of an interrupted transfer stay in ``blobs/sha256-<hex>-partial`` and the next attempt
(automatic, or the next ``localrun pull``) continues with an HTTP ``Range`` request; the result is
checked against the sha256 the hub publishes before it becomes a blob (a mismatch stores nothing
and raises DigestMismatch). Two processes pulling the same file take turns on a lock beside the
partial file; the second finds the finished blob and does not download it again.

Every download is bounded, because a hub may be broken or hostile (it may advertise more bytes than
it sends, ignore ``Range``, or trickle a byte every few seconds): at most ``MAX_RETRIES`` attempts in
a row that add no byte beyond the most the partial file ever held, ``MAX_ATTEMPTS`` in all, an
attempt receiving less than ``LOW_SPEED_BYTES`` in ``LOW_SPEED_SECONDS`` fails, and the whole pull
ends at ``LOCALRUN_PULL_TIMEOUT``. A progress callback that raises (the client went away) stops it
at the next block. The lock is released whatever happens, and waiting for it is bounded the same way.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

import httpx

from .. import __version__, config
from ..errors import DigestMismatch, ModelNotFound, PullError, StoreError
from .blobs import BlobStore, file_lock, sha256_file
from .hf import HubFile, endpoint
from .hubhttp import hub_reason
from .progress import ProgressFn, report

log = logging.getLogger(__name__)

MAX_RETRIES = 5             # attempts in a row that add no byte
MAX_ATTEMPTS = 50           # attempts in all, progress or not
LOW_SPEED_SECONDS = 30.0    # an attempt receiving less than LOW_SPEED_BYTES in this long is given up
LOW_SPEED_BYTES = 16 * 1024


def download(blobs: BlobStore, file: HubFile, progress: ProgressFn | None = None,
             *, client: httpx.Client | None = None, retries: int | None = None) -> str:
    """Download ``file`` into the store (resuming any partial bytes); returns its digest.

    Bounded: at most ``MAX_RETRIES`` attempts in a row that add no byte, ``MAX_ATTEMPTS`` in all, an
    attempt that receives less than ``LOW_SPEED_BYTES`` in ``LOW_SPEED_SECONDS`` is a failed attempt,
    and the whole pull ends at ``LOCALRUN_PULL_TIMEOUT``. ``progress`` is called for every block; an
    exception it raises (the client went away) stops the download, keeping the partial file. The lock
    shared with other pulls of the same file is released whatever happens.
    """
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    digest = f"sha256:{file.sha256}"
    blobs.ensure_dirs()
    partial = blobs.partial_path(digest)
    deadline = time.monotonic() + config.pull_timeout()

    def wait_for_lock() -> None:
        report(progress, "waiting for another pull of the same file", digest=digest, total=file.size)
        if time.monotonic() > deadline:
            raise PullError(f"another pull of {file.filename} did not finish in time; try again later")

    with file_lock(partial.with_name(partial.name + ".lock"), on_wait=wait_for_lock):
        if blobs.has(digest):
            blobs.ensure_verified(digest)
            return digest
        url = hf_hub_url(file.repo, file.filename, revision=file.revision, endpoint=endpoint())
        headers = build_hf_headers(library_name="localrun", library_version=__version__)
        own = client is None
        http = client or httpx.Client(follow_redirects=True, timeout=httpx.Timeout(30.0, connect=10.0))
        try:
            _Transfer(http, url, headers, partial, file, digest, progress, deadline,
                      MAX_RETRIES if retries is None else retries).run()
        except OSError as exc:  # the disk, not the network: ENOSPC, EDQUOT, EIO, a read-only store...
            raise StoreError(_write_error(file, blobs, exc)) from None
        finally:
            if own:
                http.close()
        report(progress, "verifying sha256 digest", digest=digest, total=file.size, completed=file.size)
        actual = sha256_file(partial, lambda done: report(progress, "verifying sha256 digest", digest=digest,
                                                          total=file.size, completed=done))
        if actual != digest:
            partial.unlink(missing_ok=True)
            raise DigestMismatch(
                f"{file.filename} from hf.co/{file.repo} hashes to {actual}, but the hub advertises {digest}; "
                "nothing was stored (try again; if it persists the hub's file changed)"
            )
        with open(partial, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(partial, blobs.path(digest))
        blobs.mark_verified(digest)
        partial.with_name(partial.name + ".lock").unlink(missing_ok=True)
    log.info("downloaded %s from hf.co/%s (%d bytes)", file.filename, file.repo, file.size)
    return digest


class _Transfer:
    """The attempts of one download (see :func:`download`); owns the partial file while it runs."""

    def __init__(self, http: httpx.Client, url: str, headers: dict[str, str], partial: Path, file: HubFile,
                 digest: str, progress: ProgressFn | None, deadline: float, retries: int) -> None:
        self.http, self.url, self.headers, self.partial, self.file = http, url, headers, partial, file
        self.digest, self.progress, self.deadline, self.retries = digest, progress, deadline, retries
        self.started = time.monotonic()
        self.fetched = 0  # bytes fetched in this call (for the rate)

    def size(self) -> int:
        return self.partial.stat().st_size if self.partial.exists() else 0

    def run(self) -> None:
        failures, attempts = 0, 0
        best = self.size()  # the most bytes the partial file has held: only going past it is progress
        while True:
            offset = self.size()
            if offset > self.file.size:
                self.partial.unlink()
                offset = 0
            if offset == self.file.size:
                return
            attempts += 1
            try:
                self._attempt(offset)
                return
            except _Retry as exc:
                have = self.size()
                # Bytes past the best so far start a fresh run of retries, unless they came too slowly.
                failures = 1 if have > best and not exc.slow else failures + 1
                best = max(best, have)
                if failures > self.retries or attempts >= MAX_ATTEMPTS:
                    raise PullError(
                        f"download of {self.file.filename} interrupted at {have} of {self.file.size} bytes ({exc}; "
                        f"{attempts} attempts); run the same pull again to resume"
                    ) from None
                self._check_deadline(have)
                log.warning("download of %s interrupted at %d bytes (%s); resuming", self.file.filename, have, exc)
                time.sleep(min(0.2 * 2 ** max(0, failures - 1), 5.0))

    def _check_deadline(self, have: int) -> None:
        if time.monotonic() > self.deadline:
            raise PullError(f"download of {self.file.filename} took longer than LOCALRUN_PULL_TIMEOUT "
                            f"({config.pull_timeout():.0f}s); {have} of {self.file.size} bytes are kept: "
                            "run the same pull again to resume")

    def _attempt(self, offset: int) -> None:
        file = self.file
        if offset:
            log.info("resuming %s at byte %d of %d", file.filename, offset, file.size)
        report(self.progress, "downloading", digest=self.digest, total=file.size, completed=offset)
        headers = dict(self.headers)
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            with self.http.stream("GET", self.url, headers=headers) as r:
                self._check_status(r, offset)
                mode = "ab"
                if r.status_code == 200 or not _range_starts_at(r, offset):
                    mode, offset = "wb", 0  # the server sent the whole file
                with open(self.partial, mode) as out:
                    done = self._receive(r, out, offset)
        except httpx.TransportError as exc:
            raise _Retry(str(exc) or type(exc).__name__) from None
        if done < file.size:
            raise _Retry(f"the connection closed at byte {done} of {file.size}")

    def _check_status(self, r: httpx.Response, offset: int) -> None:
        file = self.file
        if r.status_code == 416:  # the range is past the end of what the hub has
            total = re.match(r"bytes \*/(\d+)", r.headers.get("content-range", ""))
            if total and int(total.group(1)) != file.size:
                raise PullError(f"the hub lists {file.filename} as {file.size} bytes but serves {total.group(1)}")
            self.partial.unlink(missing_ok=True)  # our partial file is not a prefix of the hub's: start over
            raise _Retry("the hub refused to resume (416)")
        if r.status_code in (401, 403):
            raise PullError(f"the hub refused {file.filename}: {hub_reason(r)} (log in or accept its license)")
        if r.status_code == 404:
            raise ModelNotFound(f"{file.filename} not found in hf.co/{file.repo}")
        if r.status_code >= 500 or r.status_code == 429:
            raise _Retry(f"the hub answered {hub_reason(r)}")
        if r.status_code not in (200, 206):
            raise PullError(f"the hub answered {hub_reason(r)} for {file.filename}")
        length = r.headers.get("content-length", "")
        expected = file.size - (offset if r.status_code == 206 else 0)
        if length.isdigit() and int(length) > expected:
            raise PullError(f"the hub sends {length} bytes of {file.filename} where {expected} are expected")

    def _receive(self, r: httpx.Response, out: Any, offset: int) -> int:
        """Write the body to ``out``; the byte count reached. _Retry when it arrives too slowly."""
        file, done = self.file, offset
        window_start, window_bytes = time.monotonic(), 0
        for block in r.iter_bytes():  # as received: no bytes lost if the connection drops
            if done + len(block) > file.size:
                raise PullError(f"the hub sent more than the advertised {file.size} bytes of {file.filename}")
            out.write(block)
            done += len(block)
            self.fetched += len(block)
            window_bytes += len(block)
            now = time.monotonic()
            elapsed = now - self.started
            report(self.progress, "downloading", digest=self.digest, total=file.size, completed=done,
                   rate=self.fetched / elapsed if elapsed > 0 else None)
            if now - window_start >= LOW_SPEED_SECONDS:
                if window_bytes < LOW_SPEED_BYTES:
                    raise _Retry(f"less than {LOW_SPEED_BYTES} bytes arrived in {LOW_SPEED_SECONDS:.0f}s", slow=True)
                window_start, window_bytes = now, 0
            if now > self.deadline:
                out.flush()
                self._check_deadline(done)
        return done


class _Retry(Exception):
    """An attempt failed in a way another attempt may fix (cut connection, 5xx, too slow)."""

    def __init__(self, reason: str, *, slow: bool = False) -> None:
        super().__init__(reason)
        self.slow = slow


def _write_error(file: HubFile, blobs: BlobStore, exc: OSError) -> str:
    message = f"cannot write {file.filename} into the model store at {blobs.dir}: {exc.strerror or exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        message += "; free some disk space and run the same pull again to resume"
    return message


def _range_starts_at(r: httpx.Response, offset: int) -> bool:
    m = re.match(r"bytes (\d+)-", r.headers.get("content-range", ""))
    return r.status_code == 206 and m is not None and int(m.group(1)) == offset
