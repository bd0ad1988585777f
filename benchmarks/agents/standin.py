"""A stand-in model server that saves what coding agents send it (issue #25 point 5).

    python benchmarks/agents/standin.py --port 8999 --out DIR [--reply TEXT] [--input-tokens N] [--delay S]

Answers, on 127.0.0.1, the APIs the agents speak, with one short text reply and no tool call,
so an agent's turn ends after one request:

- ``POST /v1/messages`` (Anthropic Messages, Claude Code): a streamed SSE reply (or a JSON one
  when ``stream`` is false); ``POST /v1/messages/count_tokens`` gets a rough count;
- ``POST /v1/responses`` (OpenAI Responses, Codex): a streamed SSE reply;
- ``POST /v1/chat/completions`` (opencode, llama-server's API): a streamed chat completion;
- ``GET /v1/models``: one model, ``standin``; anything else: 404.

Every request body is saved, in arrival order, as ``DIR/NNN-<endpoint>.json``
(``{"method", "path", "headers", "body"}``, the API key headers left out). ``--delay`` waits
before a reply's first event (a dry run of ``benchmarks/agent_replay.py`` then measures something).
Standard library only, so it runs before (or without) the project's virtualenv. Not part of
localrun.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SECRET_HEADERS = {"authorization", "x-api-key", "cookie"}


@dataclass(frozen=True, slots=True)
class Reply:
    """What every answer holds: its text and the prompt size its usage reports.

    A large ``input_tokens`` makes the agent believe its context is that full, which shows
    when it compacts (the check that an agent read the window ``localrun launch`` gave it).
    """

    text: str = "Done."
    input_tokens: int = 10
    delay: float = 0.0  # seconds before the first event, as a model's prompt reading would take


class Recorder:
    """Numbers and writes each request to ``out`` (thread-safe: requests arrive on server threads)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._lock = threading.Lock()
        self._count = itertools.count(1)

    def save(self, method: str, path: str, headers: dict[str, str], body: Any) -> Path:
        with self._lock:
            n = next(self._count)
        name = path.split("?")[0].strip("/").replace("/", "_") or "root"
        target = self.out / f"{n:03d}-{name}.json"
        kept = {k: v for k, v in headers.items() if k.lower() not in SECRET_HEADERS}
        target.write_text(json.dumps({"method": method, "path": path, "headers": kept, "body": body}, indent=1))
        return target


def sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def anthropic_events(model: str, reply: Reply) -> Iterator[bytes]:
    """The Messages API's event sequence for one text block."""
    msg_id = f"msg_standin{int(time.time() * 1000)}"
    usage = {"input_tokens": reply.input_tokens, "output_tokens": 0, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    yield sse("message_start", {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}})
    yield sse("content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}})
    yield sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": reply.text}})
    yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                "usage": {"output_tokens": 5}})
    yield sse("message_stop", {"type": "message_stop"})


def anthropic_message(model: str, reply: Reply) -> dict[str, Any]:
    return {"id": "msg_standin", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": reply.text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": 5}}


def responses_events(model: str, reply: Reply) -> Iterator[bytes]:
    """The Responses API's event sequence for one output message (what Codex waits for: ``response.completed``)."""
    rid, item_id = f"resp_standin{int(time.time() * 1000)}", "msg_standin"
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model, "output": []}
    item = {"id": item_id, "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}]}
    seq = itertools.count()
    yield sse("response.created", {"type": "response.created", "sequence_number": next(seq),
                                   "response": {**base, "status": "in_progress"}})
    yield sse("response.output_item.added", {"type": "response.output_item.added", "sequence_number": next(seq),
                                             "output_index": 0, "item": {**item, "status": "in_progress",
                                                                         "content": []}})
    yield sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": next(seq),
                                             "item_id": item_id, "output_index": 0, "content_index": 0,
                                             "delta": reply.text})
    yield sse("response.output_item.done", {"type": "response.output_item.done", "sequence_number": next(seq),
                                            "output_index": 0, "item": item})
    usage = {"input_tokens": reply.input_tokens, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": reply.input_tokens + 5}
    yield sse("response.completed", {"type": "response.completed", "sequence_number": next(seq),
                                     "response": {**base, "status": "completed", "output": [item], "usage": usage}})


def chat_events(model: str, reply: Reply) -> Iterator[bytes]:
    chunk = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    yield sse(None, {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": reply.text},
                                           "finish_reason": None}]})
    yield sse(None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": reply.input_tokens, "completion_tokens": 5,
                               "total_tokens": reply.input_tokens + 5}})
    yield b"data: [DONE]\n\n"


class Handler(BaseHTTPRequestHandler):
    """One request: save it, then answer in the API its path names."""

    recorder: Recorder
    reply: Reply
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        print(f"standin: {self.command} {self.path}", flush=True)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding") == "zstd":
            raise SystemExit("zstd-compressed body: run the agent with compression off")
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode("utf-8", "replace")

    def do_HEAD(self) -> None:  # Claude Code's reachability probe of the base URL
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.recorder.save("GET", self.path, dict(self.headers), None)
        if self.path.split("?")[0].rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "standin", "object": "model", "owned_by": "standin"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        body = self._body()
        self.recorder.save("POST", self.path, dict(self.headers), body)
        path = self.path.split("?")[0].rstrip("/")
        request = body if isinstance(body, dict) else {}
        model = str(request.get("model") or "standin")
        if path == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": len(json.dumps(request)) // 4})
        elif path == "/v1/messages" and request.get("stream"):
            self._stream(anthropic_events(model, self.reply))
        elif path == "/v1/messages":
            self._json(200, anthropic_message(model, self.reply))
        elif path == "/v1/responses":
            self._stream(responses_events(model, self.reply))
        elif path == "/v1/chat/completions":
            self._stream(chat_events(model, self.reply))
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(self.reply.delay)
        for event in events:
            self.wfile.write(event)
            self.wfile.flush()
        self.close_connection = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8999)
    parser.add_argument("--out", type=Path, required=True, help="folder for the saved requests")
    parser.add_argument("--reply", default="Done.", help="the text every reply holds")
    parser.add_argument("--input-tokens", type=int, default=10,
                        help="the prompt tokens every reply reports: a large count shows when an agent compacts")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before a reply's first event")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    Handler.recorder = Recorder(args.out)
    Handler.reply = Reply(args.reply, args.input_tokens, args.delay)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"standin: listening on http://127.0.0.1:{args.port}, saving to {args.out}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
