"""Hugging Face hub access: list a repo's GGUF files and pick one by quant.

Listing reads the hub's model info (the call ``HfApi.model_info(files_metadata=True)`` makes, then
``paths-info`` for files the listing gives no LFS sha256 for) with httpx, size-capped before parsing
(:mod:`.hubhttp`: a hub we do not trust may send a gzip bomb or an endless body), and checks every
field it uses. It honours ``HF_ENDPOINT`` and the user's token (``HF_TOKEN`` or ``hf auth login``,
through ``build_hf_headers``); the endpoint is read when called, so a changed ``HF_ENDPOINT`` takes
effect without a restart.

Downloading a picked file (resumable, verified, bounded) is :func:`localrun.store.hfdownload.download`.
Hub failures are PullErrors (HTTP 502) carrying the hub's own status and message.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from .. import __version__
from ..errors import ModelNotFound, PullError
from .hubhttp import request_json

log = logging.getLogger(__name__)

DEFAULT_QUANT = "Q4_K_M"
DEFAULT_ENDPOINT = "https://huggingface.co"
MAX_FILE_SIZE = 1 << 44     # 16 TiB: a listed size beyond it is a lie
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_SHA_RE = re.compile(r"[0-9a-f]{64}")
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


def _is_projector(filename: str) -> bool:
    base = Path(filename).name.lower()
    return base.endswith(".gguf") and "mmproj" in base


def list_ggufs(repo: str, *, client: httpx.Client | None = None) -> list[HubFile]:
    """The repo's GGUF files (weights and vision projectors) with sizes and sha256s; raises
    ModelNotFound / PullError.

    The listing is the hub's ``/api/models/{repo}?blobs=true`` (what ``HfApi.model_info`` reads), then
    ``paths-info`` for files it gives no LFS sha256 for; both are read size-capped (:mod:`.hubhttp`) and
    every field is checked before use. A file whose size or sha256 is malformed is skipped with a
    warning; a listing with nothing usable is a PullError naming what was wrong.
    """
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    url = endpoint()
    headers = build_hf_headers(library_name="localrun", library_version=__version__)
    own = client is None
    http = client or httpx.Client(follow_redirects=True, timeout=httpx.Timeout(30.0, connect=10.0))
    what = f"hf.co/{repo}"
    try:
        info = request_json(http, "GET", f"{url}/api/models/{repo}", what, params={"blobs": "true"}, headers=headers)
        if not isinstance(info, dict):
            raise PullError(f"the hub's listing of {what} is not a JSON object")
        revision = info.get("sha")
        if not isinstance(revision, str) or not _COMMIT_RE.fullmatch(revision):
            raise PullError(f"the hub's listing of {what} has no valid commit id (sha: {str(revision)[:50]!r})")
        siblings = info.get("siblings") or []
        if not isinstance(siblings, list):
            raise PullError(f"the hub's listing of {what} is malformed (siblings is not a list)")
        found = {e["rfilename"]: e for e in siblings if isinstance(e, dict) and isinstance(e.get("rfilename"), str)
                 and (_is_weights(e["rfilename"]) or _is_projector(e["rfilename"]))}
        lacking = [name for name, e in found.items() if not _lfs(e).get("sha256")]
        if lacking:  # no LFS metadata in the listing: ask paths-info, which always carries it
            entries = request_json(http, "POST", f"{url}/api/models/{repo}/paths-info/{revision}", what,
                                   json={"paths": lacking, "expand": True}, headers=headers)
            for entry in entries if isinstance(entries, list) else []:
                lfs = entry.get("lfs") if isinstance(entry, dict) else None
                if isinstance(lfs, dict) and entry.get("path") in found:
                    found[entry["path"]] = {"rfilename": entry["path"], "size": lfs.get("size"),
                                            "lfs": {"sha256": lfs.get("oid"), "size": lfs.get("size")}}
    finally:
        if own:
            http.close()
    files, problems = [], []
    for filename, entry in found.items():
        lfs = _lfs(entry)
        size, sha = lfs.get("size", entry.get("size")), lfs.get("sha256")
        problem = _check_size(size) or _check_sha(sha)
        if problem or not isinstance(size, int):
            log.warning("%s: skipping %s: %s", what, filename, problem)
            problems.append(f"{filename}: {problem}")
            continue
        files.append(HubFile(repo, filename, size, str(sha).lower(), revision))
    if problems and not files:
        raise PullError(f"the hub's listing of {what} is malformed: {'; '.join(problems)[:300]}")
    return files


def pick_projector(files: list[HubFile], weights: HubFile) -> HubFile | None:
    """The repo's vision projector for ``weights`` (as llama-server's ``-hf`` brings it along): the
    mmproj of the same quant, else F16, BF16, F32, else the first by name; None when the repo has none."""
    projectors = sorted((f for f in files if _is_projector(f.filename)), key=lambda f: f.filename)
    if not projectors:
        return None
    order = [quant_of(weights.filename), "F16", "BF16", "F32"]
    for want in order:
        found = [f for f in projectors if want and quant_of(f.filename) == want]
        if found:
            return found[0]
    return projectors[0]


def _lfs(entry: dict[str, object]) -> dict[str, object]:
    lfs = entry.get("lfs")
    return lfs if isinstance(lfs, dict) else {}


def _check_size(size: object) -> str | None:
    if isinstance(size, bool) or not isinstance(size, int):
        return f"its size {str(size)[:30]!r} is not a number of bytes"
    if not 0 < size <= MAX_FILE_SIZE:
        return f"its size {size} is not between 1 byte and {MAX_FILE_SIZE:,}"
    return None


def _check_sha(sha: object) -> str | None:
    if not isinstance(sha, str) or not _SHA_RE.fullmatch(sha.lower()):
        return "it has no valid LFS sha256"
    return None


def pick(files: list[HubFile], quant: str | None, repo: str) -> HubFile:
    """The weights file for ``quant`` (case-insensitive); default Q4_K_M, else the only GGUF."""
    files = [f for f in files if _is_weights(f.filename)]
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
