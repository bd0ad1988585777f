"""HTTP to upstreams: timeouts, size bounds, line framing and errors that never show a key.

Every byte an upstream sends is bounded: one SSE or NDJSON line at most :data:`MAX_LINE_BYTES`,
one reply at most :data:`MAX_REPLY_BYTES`, one JSON body (model lists, embeddings) at most
:data:`MAX_JSON_BYTES`. A request carries only what localrun builds for it
(:func:`request_headers`): never a header of the client's request. Error texts pass through
:func:`redact` before they reach a log or a client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import httpx

from .. import __version__
from ..errors import UpstreamError
from ..jsontypes import JSONValue, loads

# connect: a dead member is passed over quickly; read: the longest silence between two chunks
# (a long prompt's prefill on a busy server comes before the first one); pool: waiting for a
# connection slot of our own client.
REQUEST_TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=30.0)
PROBE_TIMEOUT = httpx.Timeout(10.0, connect=3.0)  # health checks and model lists (a busy server answers late)
MAX_LINE_BYTES = 4 << 20
MAX_REPLY_BYTES = 64 << 20
MAX_JSON_BYTES = 64 << 20
MAX_ERROR_BYTES = 4096
LIMITS = httpx.Limits(max_connections=512, max_keepalive_connections=64, keepalive_expiry=30.0)


def new_client(transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """The one client of a daemon's upstream traffic (no proxies from the environment, no redirects:
    an upstream cannot send localrun, or its key, elsewhere)."""
    return httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=LIMITS, transport=transport, trust_env=False,
                             follow_redirects=False)


# Sent with every request to an upstream. A localrun daemon receiving it serves that request from its
# own models only (no upstream of its own is listed or used): two daemons that list each other, or
# one that lists itself, cannot send a request around in a loop.
PEER_HEADER = "X-Localrun-Peer"


def request_headers(api_key: str | None) -> dict[str, str]:
    headers = {"User-Agent": f"localrun/{__version__}", "Accept": "application/json, text/event-stream",
               PEER_HEADER: "1"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every secret replaced by ``***`` (an upstream may echo a key in an error)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


async def lines(response: httpx.Response, max_line: int = MAX_LINE_BYTES,
                max_total: int = MAX_REPLY_BYTES) -> AsyncIterator[str]:
    """The response body as text lines (``\\n``-separated, ``\\r`` stripped), bounded.

    Raises UpstreamError when one line or the whole body is larger than allowed.
    """
    buf = b""
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > max_total:
            raise UpstreamError(f"the reply was larger than {max_total} bytes")
        buf += chunk
        while True:
            cut = buf.find(b"\n")
            if cut < 0:
                break
            line, buf = buf[:cut], buf[cut + 1:]
            yield line.rstrip(b"\r").decode("utf-8", "replace")
        if len(buf) > max_line:
            raise UpstreamError(f"a line of the reply was longer than {max_line} bytes")
    if buf:
        yield buf.rstrip(b"\r").decode("utf-8", "replace")


async def sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event (multi-line data joined with ``\\n``)."""
    data: list[str] = []
    async for line in lines(response):
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield "\n".join(data)


async def body_bytes(response: httpx.Response, limit: int) -> bytes:
    out = bytearray()
    async for chunk in response.aiter_bytes():
        out += chunk
        if len(out) > limit:
            raise UpstreamError(f"the reply was larger than {limit} bytes")
    return bytes(out)


async def read_json(response: httpx.Response, limit: int = MAX_JSON_BYTES) -> JSONValue:
    raw = await body_bytes(response, limit)
    try:
        return loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise UpstreamError(f"the reply is not JSON ({exc})") from None


async def error_text(response: httpx.Response) -> str:
    """The upstream's own error message (OpenAI's ``error.message``, Ollama's ``error``), short."""
    try:
        raw = await body_bytes(response, MAX_ERROR_BYTES)
    except (UpstreamError, httpx.HTTPError):
        raw = b""
    text = raw.decode("utf-8", "replace").strip()
    try:
        body = loads(text)
    except ValueError:
        return text[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
        if isinstance(body.get("message"), str):
            return str(body["message"])[:500]
        if isinstance(body.get("detail"), str):
            return str(body["detail"])[:500]
    return text[:500]
