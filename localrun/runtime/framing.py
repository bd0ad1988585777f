"""Length-prefixed JSON frames: the one codec between localrun's processes.

The daemon and its model runners (:mod:`.protocol`), and the daemon and its bounded workers
(:mod:`.bounded`), exchange frames: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
The size rule is the same on every channel: the channel names its limit; the writer refuses a
message over it before sending anything (:class:`~localrun.errors.FrameTooLarge`); the reader
refuses an announced length over it, a body that is not JSON, or a stream that ends inside a
frame (:class:`~localrun.errors.BadFrame`). A stream that ends between two frames ends cleanly:
the readers return None.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import IO

from ..errors import BadFrame, FrameTooLarge
from ..jsontypes import JSONValue

HEADER = struct.Struct(">I")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # json.dumps builds one a call


def encode(message: object, limit: int) -> bytes:
    """``message`` as one frame. TypeError or ValueError when it is not JSON (``json.dumps``
    checks), FrameTooLarge when its body is over ``limit`` bytes."""
    body = _ENCODER.encode(message).encode("utf-8")
    if len(body) > limit:
        raise FrameTooLarge(f"message of {len(body)} bytes is over the {limit}-byte frame limit")
    return HEADER.pack(len(body)) + body


def read_sync(stream: IO[bytes], limit: int) -> JSONValue | None:
    """The next frame's message from a binary file (blocking); None at a clean end of stream."""
    header = stream.read(HEADER.size)
    if not header:
        return None
    if len(header) < HEADER.size:
        raise BadFrame("the stream ended inside a frame header")
    (length,) = HEADER.unpack(header)
    if length > limit:
        raise BadFrame(f"the peer announced a {length}-byte frame (the limit is {limit})")
    body = stream.read(length)
    if len(body) < length:
        raise BadFrame("the stream ended inside a frame")
    return _decode(body)


async def read_async(reader: asyncio.StreamReader, limit: int) -> JSONValue | None:
    """The next frame's message from an asyncio stream; None at a clean end of stream."""
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise BadFrame("the stream ended inside a frame header") from exc
        return None
    (length,) = HEADER.unpack(header)
    if length > limit:
        raise BadFrame(f"the peer announced a {length}-byte frame (the limit is {limit})")
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise BadFrame("the stream ended inside a frame") from exc
    return _decode(body)


def _decode(body: bytes) -> JSONValue:
    try:
        message: JSONValue = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadFrame(f"the peer sent a malformed frame: {exc}") from exc
    return message
