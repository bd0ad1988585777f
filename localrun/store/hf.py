"""Hugging Face hub access: list a repo's GGUF files, pick one by quant, download it resumably.

Listing goes through ``huggingface_hub`` (``HfApi.model_info(files_metadata=True)``, then
``get_paths_info`` for files the listing gives no LFS sha256 for), which
honours ``HF_ENDPOINT`` and the user's token (``HF_TOKEN`` or ``hf auth login``); the endpoint
is read when called, so a changed ``HF_ENDPOINT`` takes effect without a restart. The download
itself is streamed with httpx from ``hf_hub_url`` with ``build_hf_headers`` so that it can:

- keep the bytes of an interrupted transfer in ``blobs/sha256-<hex>-partial`` and continue with
  an HTTP ``Range`` request, both when the connection drops (automatic retries) and on the next
  ``localrun pull`` (the partial file survives);
- check the result against the sha256 the hub publishes for the LFS file: a mismatch removes the
  partial file, stores nothing and raises DigestMismatch.

Two processes pulling the same file take turns on a lock beside the partial file; the second
finds the finished blob and does not download it again.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from .. import __version__
from ..errors import DigestMismatch, ModelNotFound, PullError, StoreError
from .blobs import BlobStore, file_lock, sha256_file
from .progress import ProgressFn, report

log = logging.getLogger(__name__)

DEFAULT_QUANT = "Q4_K_M"
DEFAULT_ENDPOINT = "https://huggingface.co"
MAX_RETRIES = 5
_QUANT_RE = re.compile(r"(?:^|[-._])((?:I?Q\d[A-Z0-9_]*)|BF16|F16|F32|FP16|FP32)$", re.IGNORECASE)
_SPLIT_RE = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class HubFile:
    repo: str
    filename: str
    size: int
    sha256: str        # hex, from the hub's LFS metadata
    revision: str      # the commit the listing came from (pins the download)


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def quant_of(filename: str) -> str | None:
    """The quant label in a GGUF file name (``...-Q4_K_M.gguf`` -> ``Q4_K_M``), or None."""
    stem = Path(filename).name
    if stem.lower().endswith(".gguf"):
        stem = stem[:-5]
    m = _QUANT_RE.search(stem)
    return m.group(1).upper() if m else None


def _is_weights(filename: str) -> bool:
    base = Path(filename).name.lower()
    return base.endswith(".gguf") and "mmproj" not in base


def list_ggufs(repo: str) -> list[HubFile]:
    """The repo's GGUF weight files with sizes and sha256s; raises ModelNotFound / PullError."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    url = endpoint()
    api = HfApi(endpoint=url, library_name="localrun", library_version=__version__)
    try:
        info = api.model_info(repo, files_metadata=True, timeout=30)
        revision = info.sha or "main"
        found: dict[str, tuple[int | None, str | None]] = {}
        for s in info.siblings or []:
            if _is_weights(s.rfilename):
                lfs = s.lfs
                found[s.rfilename] = (getattr(lfs, "size", None) if lfs else s.size, getattr(lfs, "sha256", None))
        lacking = [name for name, (_, sha) in found.items() if not sha]
        if lacking:  # no LFS metadata in the listing: ask paths-info, which always carries it
            for entry in api.get_paths_info(repo, lacking, revision=revision):
                lfs = getattr(entry, "lfs", None)
                if lfs is not None:
                    found[entry.path] = (lfs.size, lfs.sha256)
    except GatedRepoError:
        raise PullError(
            f"hf.co/{repo} is gated: accept its license on the hub and log in (`hf auth login` or HF_TOKEN)"
        ) from None
    except RepositoryNotFoundError:
        raise ModelNotFound(f"hf.co/{repo} not found on the hub (private repos need HF_TOKEN)") from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 404:
            raise ModelNotFound(f"hf.co/{repo} not found on the hub") from None
        raise PullError(f"the hub at {url} answered {status} for hf.co/{repo}") from None
    except Exception as exc:  # huggingface_hub 2.x raises its own httpx fork's errors: translate them all
        raise PullError(f"cannot reach the hub at {url}: {exc}") from None
    files = []
    for filename, (size, sha) in found.items():
        if not sha or size is None:
            log.warning("hf.co/%s: %s has no LFS sha256 on the hub; skipping it", repo, filename)
            continue
        files.append(HubFile(repo, filename, int(size), str(sha).lower(), revision))
    return files


def pick(files: list[HubFile], quant: str | None, repo: str) -> HubFile:
    """The file for ``quant`` (case-insensitive); default Q4_K_M, else the only GGUF."""
    if not files:
        raise ModelNotFound(f"hf.co/{repo} has no GGUF files")
    want = (quant or DEFAULT_QUANT).upper()
    matches = [f for f in files if quant_of(f.filename) == want]
    if not matches and quant is None and len(files) == 1:
        matches = files
    if not matches:
        available = sorted({q for f in files if (q := quant_of(f.filename))})
        shown = ", ".join(available) if available else ", ".join(sorted(f.filename for f in files))
        asked = f"quant {want}" if quant else f"the default quant {DEFAULT_QUANT}"
        raise ModelNotFound(f"hf.co/{repo} has no GGUF for {asked}; available: {shown} (use hf.co/{repo}:QUANT)")
    whole = [f for f in matches if not _SPLIT_RE.search(f.filename)]
    if not whole:
        raise PullError(f"hf.co/{repo}: {matches[0].filename} is split into parts, which localrun cannot load yet")
    return sorted(whole, key=lambda f: (len(f.filename), f.filename))[0]


def download(blobs: BlobStore, file: HubFile, progress: ProgressFn | None = None,
             *, client: httpx.Client | None = None, retries: int | None = None) -> str:
    """Download ``file`` into the store (resuming any partial bytes); returns its digest."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    digest = f"sha256:{file.sha256}"
    blobs.ensure_dirs()
    partial = blobs.partial_path(digest)
    with file_lock(partial.with_name(partial.name + ".lock")):
        if blobs.has(digest):
            blobs.ensure_verified(digest)
            return digest
        url = hf_hub_url(file.repo, file.filename, revision=file.revision, endpoint=endpoint())
        headers = build_hf_headers(library_name="localrun", library_version=__version__)
        own = client is None
        http = client or httpx.Client(follow_redirects=True, timeout=httpx.Timeout(30.0, connect=10.0))
        try:
            _transfer(http, url, headers, partial, file, digest, progress,
                      MAX_RETRIES if retries is None else retries)
        except OSError as exc:  # the disk, not the network: ENOSPC, EDQUOT, EIO, a read-only store...
            raise StoreError(_write_error(file, blobs, exc)) from None
        finally:
            if own:
                http.close()
        report(progress, "verifying sha256 digest", digest=digest, total=file.size, completed=file.size)
        actual = sha256_file(partial)
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


def _transfer(http: httpx.Client, url: str, headers: dict[str, str], partial: Path, file: HubFile,
              digest: str, progress: ProgressFn | None, retries: int) -> None:
    failures = 0
    started = time.monotonic()
    fetched = 0  # bytes fetched in this call (for the rate)
    while True:
        offset = partial.stat().st_size if partial.exists() else 0
        if offset > file.size:
            partial.unlink()
            offset = 0
        if offset == file.size:
            return
        if offset:
            log.info("resuming %s at byte %d of %d", file.filename, offset, file.size)
        report(progress, "downloading", digest=digest, total=file.size, completed=offset)
        req_headers = dict(headers)
        if offset:
            req_headers["Range"] = f"bytes={offset}-"
        try:
            with http.stream("GET", url, headers=req_headers) as r:
                if r.status_code == 416:  # the range is past the end: our partial is not a prefix
                    partial.unlink(missing_ok=True)
                    continue
                if r.status_code in (401, 403):
                    raise PullError(f"the hub refused {file.filename} ({r.status_code}): log in or accept its license")
                if r.status_code == 404:
                    raise ModelNotFound(f"{file.filename} not found in hf.co/{file.repo}")
                if r.status_code >= 500 or r.status_code == 429:
                    raise httpx.TransportError(f"the hub answered {r.status_code}")
                if r.status_code not in (200, 206):
                    raise PullError(f"the hub answered {r.status_code} for {file.filename}")
                mode = "ab"
                if r.status_code == 200 or not _range_starts_at(r, offset):
                    mode, offset = "wb", 0  # the server sent the whole file
                with open(partial, mode) as out:
                    done = offset
                    for block in r.iter_bytes():  # as received: no bytes lost if the connection drops
                        if done + len(block) > file.size:
                            raise PullError(f"the hub sent more than the advertised {file.size} bytes of {file.filename}")
                        out.write(block)
                        done += len(block)
                        fetched += len(block)
                        elapsed = time.monotonic() - started
                        report(progress, "downloading", digest=digest, total=file.size, completed=done,
                               rate=fetched / elapsed if elapsed > 0 else None)
                if done < file.size:
                    raise httpx.RemoteProtocolError(f"connection closed at byte {done} of {file.size}")
                return
        except httpx.TransportError as exc:
            have = partial.stat().st_size if partial.exists() else 0
            failures = 1 if have > offset else failures + 1  # progress made: a fresh run of retries
            if failures > retries:
                raise PullError(
                    f"download of {file.filename} interrupted at {have} of {file.size} bytes ({exc}); "
                    "run the same pull again to resume"
                ) from None
            log.warning("download of %s interrupted at %d bytes (%s); resuming", file.filename, have, exc)
            time.sleep(min(0.2 * 2 ** (failures - 1), 5.0))


def _write_error(file: HubFile, blobs: BlobStore, exc: OSError) -> str:
    message = f"cannot write {file.filename} into the model store at {blobs.dir}: {exc.strerror or exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        message += "; free some disk space and run the same pull again to resume"
    return message


def _range_starts_at(r: httpx.Response, offset: int) -> bool:
    m = re.match(r"bytes (\d+)-", r.headers.get("content-range", ""))
    return r.status_code == 206 and m is not None and int(m.group(1)) == offset
