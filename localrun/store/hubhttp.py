"""Talking to a hub we do not trust: size-capped answers, the hub's own reason on failures.

A hub (or anything answering at ``HF_ENDPOINT``) may send a gzip bomb (1 MB inflating to 1 GB), a
listing that never ends, or an error page. :func:`get_json` / :func:`post_json` read at most
``limit`` bytes off the wire *and* at most ``limit`` bytes after decompression (we decompress
ourselves, in bounded steps, and accept only gzip, deflate and identity), within an overall
deadline, and only then parse. :func:`hub_reason` turns a failed answer into a short, printable
reason for the PullError (HTTP 502) the client sees.
"""

from __future__ import annotations

import re
import time
import zlib
from typing import Any

import httpx

from ..errors import ModelNotFound, PullError
from ..jsontypes import loads

MAX_ANSWER = 16 * 1024 * 1024   # bytes of a listing, compressed and decompressed (real ones: kilobytes)
ANSWER_DEADLINE = 60.0          # seconds to receive a whole listing
_CHUNK = 64 * 1024
_PRINTABLE = re.compile(r"[^\x20-\x7e]+")


def _decoder(encoding: str) -> Any:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise PullError(f"the hub sent its answer in an unsupported encoding ({encoding[:40]!r})")


def read_capped(response: httpx.Response, *, limit: int = MAX_ANSWER, deadline: float = ANSWER_DEADLINE) -> bytes:
    """The decoded body of a streamed ``response``; PullError past ``limit`` bytes (either side) or the deadline."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PullError(f"the hub's answer is {int(declared):,} bytes, more than the {limit:,} a listing may be")
    decoder = _decoder(response.headers.get("content-encoding", ""))
    started = time.monotonic()
    received, out = 0, bytearray()
    try:
        for chunk in response.iter_raw(_CHUNK):
            received += len(chunk)
            if received > limit:
                raise PullError(f"the hub's answer is longer than {limit:,} bytes (a listing is kilobytes)")
            if decoder is None:
                out += chunk
            else:
                out += decoder.decompress(chunk, limit + 1 - len(out))
                if decoder.unconsumed_tail or len(out) > limit:
                    raise PullError(f"the hub's answer inflates to more than {limit:,} bytes (a decompression bomb?)")
            if time.monotonic() - started > deadline:
                raise PullError(f"the hub took longer than {deadline:.0f}s to send a listing")
        if decoder is not None:
            out += decoder.flush()
    except zlib.error as exc:
        raise PullError(f"the hub's compressed answer is corrupt ({exc})") from None
    if len(out) > limit:
        raise PullError(f"the hub's answer inflates to more than {limit:,} bytes")
    return bytes(out)


def hub_reason(response: httpx.Response, body: bytes = b"") -> str:
    """``403 Forbidden: <the hub's message>``, short and printable."""
    message = response.headers.get("x-error-message", "")
    if not message and body:
        try:
            parsed = loads(body[:65536])
            message = str(parsed.get("error", "")) if isinstance(parsed, dict) else ""
        except ValueError:
            message = body[:200].decode("utf-8", errors="replace")
    message = _PRINTABLE.sub(" ", message).strip()[:200]
    text = f"{response.status_code} {response.reason_phrase}".strip()
    return f"{text}: {message}" if message else text


def request_json(client: httpx.Client, method: str, url: str, what: str, **kwargs: Any) -> Any:
    """One capped JSON request; ModelNotFound for a missing repo, PullError (502) for every other failure."""
    headers = {**kwargs.pop("headers", {}), "Accept-Encoding": "gzip, deflate, identity"}
    try:
        with client.stream(method, url, headers=headers, **kwargs) as response:
            body = read_capped(response) if response.status_code < 400 else _error_body(response)
    except httpx.HTTPError as exc:
        raise PullError(f"cannot reach the hub for {what}: {exc}") from None
    code = response.headers.get("x-error-code", "")
    if code == "GatedRepo":
        raise PullError(f"{what} is gated: accept its license on the hub and log in (`hf auth login` or HF_TOKEN)")
    if response.status_code == 404 or code in ("RepoNotFound", "EntryNotFound"):
        raise ModelNotFound(f"{what} not found on the hub (private repos need HF_TOKEN)")
    if response.status_code >= 400:
        raise PullError(f"the hub refused {what}: {hub_reason(response, body)}")
    try:
        return loads(body)
    except ValueError as exc:
        raise PullError(f"the hub's answer for {what} is not valid JSON ({exc})") from None


def _error_body(response: httpx.Response) -> bytes:
    try:
        return read_capped(response, limit=65536, deadline=10.0)
    except PullError:
        return b""
