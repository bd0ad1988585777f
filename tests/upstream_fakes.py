"""Stand-ins for an upstream's HTTP answers, shared by the router and retry tests (httpx.MockTransport)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx

from localrun.chat.events import ContentDelta
from localrun.upstream.reply import UpstreamReply


def sse(*texts: str, finish: bool = True) -> bytes:
    """An OpenAI chat stream of ``texts``; without ``finish`` it stops before its final chunk and [DONE]."""
    chunks: list[dict[str, object]] = [{"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]}
                                       for t in texts]
    if finish:
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": len(texts)}})
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + (b"data: [DONE]\n\n" if finish else b"")


class Breaks(httpx.AsyncByteStream):
    """A body that sends ``head`` then loses the connection with ``error`` (its server went away)."""

    def __init__(self, head: bytes, error: Exception | None = None) -> None:
        self.head = head
        self.error = error or httpx.ReadError("connection reset by peer")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.head
        raise self.error


async def text_of(reply: UpstreamReply) -> str:
    """All the content a reply streams, the reply closed after."""
    try:
        return "".join([e.text async for e in reply.events() if isinstance(e, ContentDelta)])
    finally:
        await reply.close()
