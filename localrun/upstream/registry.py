"""The upstreams file: ``upstreams.json`` in the config dir (``localrun.config.upstreams_file``).

Written only by ``localrun upstream add|rm`` (the local user), read by the CLI and by the
daemon, which notices a change by the file's modification time and size (no API can add an
upstream). Writes are atomic (a temp file renamed over the old one) and the file is mode 0600,
though it holds no secret: only the *name* of each key's environment variable.

    {"upstreams": [{"name": "gpu", "url": "http://gpu-box:8000", "api": "openai",
                    "api_key_env": "GPU_BOX_KEY", "models": ["qwen3-8b"]}, ...]}
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..errors import InvalidRequest, NotFound, StoreError
from .spec import UpstreamSpec, dedupe, spec_from_json

MAX_FILE_BYTES = 1 << 20


def load(path: Path) -> tuple[UpstreamSpec, ...]:
    """The specs in ``path`` (none when it does not exist). Raises InvalidRequest for a bad file."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise InvalidRequest(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        body = json.loads(raw.decode("utf-8")) if raw.strip() else {"upstreams": []}
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest(f"{path}: not valid JSON ({exc})") from None
    items = body.get("upstreams") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise InvalidRequest(f"{path}: expected {{\"upstreams\": [...]}}")
    try:
        return dedupe([spec_from_json(i) for i in items])
    except InvalidRequest as exc:
        raise InvalidRequest(f"{path}: {exc}") from None


def save(path: Path, specs: tuple[UpstreamSpec, ...]) -> None:
    """Replace ``path`` with ``specs`` atomically (mode 0600)."""
    text = json.dumps({"upstreams": [s.to_json() for s in specs]}, indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".upstreams-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from None


def add(path: Path, spec: UpstreamSpec) -> tuple[UpstreamSpec, ...]:
    """Add ``spec`` (replacing an entry with the same name and URL); returns the new list."""
    kept = tuple(s for s in load(path) if (s.name, s.url) != (spec.name, spec.url))
    specs = (*kept, spec)
    save(path, specs)
    return specs


def remove(path: Path, name: str, url: str | None = None) -> tuple[UpstreamSpec, ...]:
    """Remove every member of ``name`` (or only the one at ``url``); returns what was removed.

    Raises NotFound when nothing matches (naming what the file holds).
    """
    specs = load(path)
    gone = tuple(s for s in specs if s.name == name and (url is None or s.url == url))
    if not gone:
        names = sorted({s.name for s in specs})
        known = f"; configured: {', '.join(names)}" if names else "; none are configured"
        what = f"{name!r} at {url}" if url else repr(name)
        raise NotFound(f"no upstream {what} in {path}{known}")
    save(path, tuple(s for s in specs if s not in gone))
    return gone
