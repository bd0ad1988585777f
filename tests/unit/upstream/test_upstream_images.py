"""Images go on to an upstream in its own API's shape (issue #28 point 2): Ollama's ``images`` with
the text as the client wrote it, OpenAI's ``image_url`` content parts in the order they stood."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from localrun.chat import images
from localrun.errors import InvalidRequest
from localrun.upstream import ollama_api, openai_api
from localrun.upstream.requests import ChatRequest


def png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + chunk(b"IDAT", zlib.compress(b"\x00\x00")) + chunk(b"IEND", b"")


B64 = base64.b64encode(png()).decode()
IMAGE = images.check(png(), "x")


def native(text: str, where: str = "look") -> dict[str, object]:
    """A native user message as the adapters build it: a marker where the image stood."""
    built = images.Content()
    built.text(where + " ", "t")
    built.image(IMAGE)
    built.text(text, "t")
    return {"role": "user", **built.fields()}


def test_an_ollama_upstream_gets_the_images_and_the_text_without_markers() -> None:
    body = ollama_api.chat_body(ChatRequest(model="m", messages=[native(" and tell me")]))
    assert body["messages"] == [{"role": "user", "content": "look  and tell me", "images": [B64]}]


def test_an_openai_upstream_gets_content_parts_in_order() -> None:
    body = openai_api.chat_body(ChatRequest(model="m", messages=[native(" and tell me")]))
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "look "},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + B64}},
        {"type": "text", "text": " and tell me"}]}]


def test_an_openai_upstream_refuses_images_in_a_tool_result() -> None:
    tool = {"role": "tool", "tool_call_id": "c", **native("")}
    tool["role"] = "tool"
    with pytest.raises(InvalidRequest, match="user messages only"):
        openai_api.chat_body(ChatRequest(model="m", messages=[tool]))
