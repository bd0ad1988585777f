"""A stand-in Hugging Face hub served on 127.0.0.1 for pull tests (no test reaches the internet).

It answers the calls huggingface_hub 2.x and localrun's downloader make:

- ``GET /api/models/{repo}[/revision/{rev}]?blobs=True`` -> model info with ``sha`` and
  ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs: {sha256, size, pointerSize}``);
- ``POST /api/models/{repo}/paths-info/{rev}`` -> file entries with ``lfs``;
- ``GET|HEAD /{repo}/resolve/{rev}/{filename}`` with ``Range`` support (206 + Content-Range) and
  the hub's ``X-Repo-Commit``, ``X-Linked-Etag``, ``X-Linked-Size`` and ``ETag`` headers.

Faults for tests: ``omit_lfs_in_info`` leaves LFS metadata out of model info;
``cut_after[filename] = [n1, n2, ...]`` closes the connection after sending ``n`` body bytes on
successive downloads of that file; ``advertise_sha[filename]`` publishes a
wrong sha256. Hostile-hub faults (issue #13): ``listing_answer`` replaces the model-info answer
with (status, headers, body) as given (a gzip bomb, an error page), ``endless_listing`` streams a
listing that never ends, ``advertise_size[filename]`` lists a size other than the file's,
``ignore_range`` answers every download with the whole file (200), ``trickle`` sends file bodies
one byte every ``trickle`` seconds. Every request is recorded in ``requests`` as (method, path, Range header).
The server runs in a daemon thread and stops when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self) -> None:
        self.files: dict[str, dict[str, bytes]] = {}
        self.cut_after: dict[str, list[int]] = {}
        self.advertise_sha: dict[str, str] = {}
        self.required_token: str | None = None
        self.omit_lfs_in_info = False  # model_info without LFS metadata (paths-info still has it)
        self.listing_answer: tuple[int, dict[str, str], bytes] | None = None
        self.endless_listing = False
        self.advertise_size: dict[str, Any] = {}
        self.ignore_range = False
        self.trickle: float | None = None
        self.requests: list[tuple[str, str, str | None]] = []
        self.body_bytes_sent = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- content -----------------------------------------------------------------------

    def add_file(self, repo: str, filename: str, data: bytes) -> str:
        """Publish ``data`` as ``repo/filename``; returns its sha256 hex."""
        self.files.setdefault(repo, {})[filename] = data
        return hashlib.sha256(data).hexdigest()

    def sha(self, filename: str, data: bytes) -> str:
        return self.advertise_sha.get(filename) or hashlib.sha256(data).hexdigest()

    def downloads(self, filename: str) -> list[str | None]:
        """The Range headers of every GET of ``filename`` (None for a full request)."""
        return [r for m, p, r in self.requests if m == "GET" and p.endswith("/" + filename)]

    # -- server ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def handler_base(self) -> type[_Handler]:
        """The request handler class to serve with (subclasses override it to change behaviour)."""
        return _Handler

    def __enter__(self) -> FakeHub:
        class Handler(self.handler_base()):  # type: ignore[misc]
            pass

        Handler.hub = self
        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    """Quiet when a client hangs up mid-reply: a pull that refused what it was sent does that on
    purpose, and the stand-in's traceback (cut short when the test ends) is not a failure."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _record(self) -> None:
        with self.hub._lock:
            self.hub.requests.append((self.command, urlparse(self.path).path, self.headers.get("Range")))

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        want = self.hub.required_token
        if want is None or self.headers.get("Authorization") == f"Bearer {want}":
            return True
        self._json(401, {"error": "Invalid credentials"}, {"X-Error-Code": "RepoNotFound"})
        return False

    def _repo_and_rest(self, path: str, marker: str) -> tuple[str, str] | None:
        if marker not in path:
            return None
        repo, rest = path.split(marker, 1)
        return repo.strip("/"), rest

    def _siblings(self, repo: str) -> list[dict[str, Any]]:
        out = []
        for name, data in self.hub.files[repo].items():
            sha = self.hub.sha(name, data)
            size = self.hub.advertise_size.get(name, len(data))
            out.append({"rfilename": name, "size": size, "blobId": hashlib.sha1(data).hexdigest(),
                        "lfs": {"sha256": sha, "size": size, "pointerSize": 134}})
        return out

    def do_GET(self) -> None:
        self._record()
        self._serve(head=False)

    def do_HEAD(self) -> None:
        self._record()
        self._serve(head=True)

    def do_POST(self) -> None:
        self._record()
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        path = unquote(urlparse(self.path).path)
        if not self._authorized():
            return
        if path.startswith("/api/models/") and "/paths-info/" in path:
            repo = path[len("/api/models/"):].split("/paths-info/")[0]
            if repo not in self.hub.files:
                self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                return
            entries = [{"type": "file", "path": s["rfilename"], "size": s["size"], "oid": s["blobId"],
                        "lfs": {"oid": s["lfs"]["sha256"], "size": s["size"], "pointerSize": 134}}
                       for s in self._siblings(repo)]
            self._json(200, entries)
            return
        self._json(404, {"error": "not found"})

    def _serve(self, head: bool) -> None:
        path = unquote(urlparse(self.path).path)
        if not self._authorized():
            return
        if path.startswith("/api/models/") and self._hostile_listing():
            return
        if path.startswith("/api/models/"):
            repo = path[len("/api/models/"):].split("/revision/")[0].strip("/")
            if repo not in self.hub.files:
                self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                return
            siblings = self._siblings(repo)
            if self.hub.omit_lfs_in_info:
                siblings = [{k: v for k, v in s.items() if k != "lfs"} for s in siblings]
            self._json(200, {"id": repo, "modelId": repo, "sha": COMMIT, "private": False, "siblings": siblings})
            return
        found = self._repo_and_rest(path, "/resolve/")
        if found is None:
            self._json(404, {"error": "not found"})
            return
        repo, rest = found
        filename = rest.split("/", 1)[1] if "/" in rest else ""
        data = self.hub.files.get(repo, {}).get(filename)
        if data is None:
            self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
            return
        self._send_file(filename, data, head)

    def _hostile_listing(self) -> bool:
        """Answer model info as the hostile-hub faults say; False when none is set."""
        if self.hub.listing_answer is not None:
            status, headers, body = self.hub.listing_answer
            self.send_response(status)
            for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}.items():
                self.send_header(k, v)
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)
            return True
        if self.hub.endless_listing:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b'{"siblings": [' + b'{"rfilename": "x"},' * 3000
            try:
                while True:  # until the client hangs up
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                pass
            self.close_connection = True
            return True
        return False

    def _send_file(self, filename: str, data: bytes, head: bool) -> None:
        start = 0
        rng = None if self.hub.ignore_range else self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[len("bytes="):].split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        body = data[start:]
        self.send_response(206 if rng else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        sha = self.hub.sha(filename, data)
        self.send_header("ETag", f'"{sha}"')
        self.send_header("X-Linked-Etag", f'"{sha}"')
        self.send_header("X-Linked-Size", str(len(data)))
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if head:
            return
        cut = None
        with self.hub._lock:
            plan = self.hub.cut_after.get(filename)
            if plan:
                cut = plan.pop(0)
        if cut is not None and cut < len(body):
            self.wfile.write(body[:cut])
            self.wfile.flush()
            with self.hub._lock:
                self.hub.body_bytes_sent += cut
            self.close_connection = True
            self.connection.close()  # drop the connection mid-file
            return
        if self.hub.trickle is not None:
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    with self.hub._lock:
                        self.hub.body_bytes_sent += 1
                    time.sleep(self.hub.trickle or 0)  # a test may turn trickling off meanwhile
            except OSError:
                self.close_connection = True
            return
        self.wfile.write(body)
        with self.hub._lock:
            self.hub.body_bytes_sent += len(body)
