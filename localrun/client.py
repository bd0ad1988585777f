"""The HTTP client of the daemon, used by the CLI and the TUI (they never import ``server/``).

:class:`AsyncClient` (httpx.AsyncClient) is the one definition of every call; :class:`Client`
(httpx.Client, for the CLI) is generated from it by ``scripts/render_sync_client.py``, so the two
have the same methods, bodies and docstrings. Streaming calls (``generate``, ``chat``, ``pull``,
``create``) return iterators of the daemon's NDJSON chunks (dicts); the rest return parsed JSON,
except ``status()`` (a :class:`DaemonStatus`). Errors come back as the :mod:`localrun.errors` class
the daemon raised (matched by its ``code``), and a daemon that does not answer raises DaemonUnavailable; so does
one that accepts the connection but does not answer ``/health`` within :data:`PROBE_TIMEOUT_S`.
Starting a daemon is the CLI's job (:func:`localrun.cli.connect.ensure_daemon`), not the client's.

Tests inject a transport (``transport=httpx.MockTransport(...)`` or an ASGI/WSGI one) instead of
patching.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from . import config, errors
from .jsontypes import JSONObject, JSONValue, as_objects

PROBE_TIMEOUT_S = 3.0  # is_running(): a port held by something that does not answer HTTP is "not running"

_BY_STATUS = {400: errors.InvalidRequest, 401: errors.Unauthorized, 403: errors.Forbidden, 404: errors.NotFound,
              413: errors.PayloadTooLarge, 502: errors.RunnerCrashed, 503: errors.Busy, 507: errors.ModelTooLarge}


_Rows = list[JSONObject]  # aliases: inside the clients, "list" is a method name
_Tokens = list[int]


def error_from(status: int, body: object, headers: Mapping[str, str] | None = None) -> errors.LocalrunError:
    """The LocalrunError for a daemon error response (either API's shape)."""
    message, code = f"HTTP {status}", None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):  # OpenAI shape
            message, code = str(err.get("message", message)), err.get("code")
        elif err is not None:
            message, code = str(err), body.get("code")
    cls = errors.BY_CODE.get(str(code)) or _BY_STATUS.get(status, errors.LocalrunError)
    if cls is errors.Busy:
        retry = float((headers or {}).get("Retry-After", 1) or 1)
        return errors.Busy(message, retry)
    return errors.from_code(cls.code, message) or errors.LocalrunError(message)


def _headers(api_key: str | None) -> dict[str, str]:
    # The CLI and the TUI generate for a person waiting at the prompt: the daemon serves them before batch work.
    headers = {"X-Localrun-Priority": "interactive"}
    key = api_key if api_key is not None else config.api_key()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _json_or_text(response: httpx.Response) -> JSONValue:
    try:
        body: JSONValue = response.json()
    except ValueError:
        return {"error": response.text or response.reason_phrase}
    return body


def _object(body: JSONValue) -> JSONObject:
    """A reply that must be a JSON object; anything else is the daemon's bug, said as a LocalrunError."""
    if not isinstance(body, dict):
        raise errors.LocalrunError(f"the daemon answered {type(body).__name__}, not a JSON object")
    return body


def _list(value: JSONValue) -> list[JSONValue]:
    if not isinstance(value, list):
        raise errors.LocalrunError(f"the daemon answered {type(value).__name__}, not a JSON list")
    return value


def _number(value: JSONValue) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.LocalrunError(f"the daemon answered {value!r}, not a number")
    return value


def _rows(body: JSONValue, key: str) -> _Rows:
    """The objects listed under ``key`` of a reply (none when it has no such list)."""
    return as_objects(_object(body).get(key))


def _payload(**fields: object) -> dict[str, object]:
    """A request body: the fields that are set (the daemon checks each one's type and range)."""
    return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    """What ``GET /api/status`` says about the daemon process: who it is, since when, where it logs.

    ``settings`` maps each ``LOCALRUN_*`` variable to the daemon's effective value, written as
    ``config.Settings.report()`` writes it (so the CLI can compare its own). ``log_file`` is a path
    on the daemon's machine; its own lines start at byte ``log_offset``.
    """

    version: str
    pid: int
    started_at: str
    uptime_s: float
    address: str
    log_file: Path | None
    log_offset: int
    settings: dict[str, str]

    @classmethod
    def from_json(cls, body: JSONObject) -> DaemonStatus:
        log_file, settings = body.get("log_file"), body.get("settings")
        return cls(
            version=str(body.get("version", "")), pid=int(_number(body.get("pid", 0))),
            started_at=str(body.get("started_at", "")), uptime_s=_number(body.get("uptime_seconds", 0.0)),
            address=str(body.get("address", "")), log_file=Path(str(log_file)) if log_file else None,
            log_offset=int(_number(body.get("log_offset", 0))),
            settings={str(k): str(v) for k, v in settings.items()} if isinstance(settings, dict) else {},
        )


def _shutdown_body(grace: float | None) -> dict[str, object]:
    return _payload(grace_seconds=grace)


class AsyncClient:
    """Async client of one daemon (default ``LOCALRUN_HOST``)."""

    def __init__(
        self, base_url: str | None = None, *, api_key: str | None = None, timeout: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url or config.host().url
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=_headers(api_key), timeout=httpx.Timeout(timeout, connect=5.0),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(
        self, method: str, path: str, body: Mapping[str, object] | None = None, timeout: float | None = None,
    ) -> JSONValue:
        try:
            response = await self._http.request(
                method, path, json=body, timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout)
        except httpx.TransportError as exc:
            raise errors.DaemonUnavailable(f"no localrun daemon answers at {self.base_url} ({exc})") from exc
        if response.status_code >= 400:
            raise error_from(response.status_code, _json_or_text(response), response.headers)
        return _json_or_text(response) if response.content else {}

    async def _stream(self, path: str, body: Mapping[str, object]) -> AsyncIterator[JSONObject]:
        try:
            async with self._http.stream("POST", path, json=body) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_from(response.status_code, _json_or_text(response), response.headers)
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    chunk = _object(json.loads(line))
                    if "error" in chunk:
                        raise error_from(500, chunk)
                    yield chunk
        except httpx.TransportError as exc:
            raise errors.DaemonUnavailable(f"no localrun daemon answers at {self.base_url} ({exc})") from exc

    async def is_running(self) -> bool:
        try:
            await self._request("GET", "/health", timeout=PROBE_TIMEOUT_S)
        except errors.LocalrunError:
            return False
        return True

    async def health(self) -> JSONObject:
        return _object(await self._request("GET", "/health"))

    async def status(self) -> DaemonStatus:
        """The daemon process: version, pid, start, log file, effective settings."""
        return DaemonStatus.from_json(_object(await self._request("GET", "/api/status")))

    async def shutdown(self, grace: float | None = None) -> float:
        """Ask the daemon to stop gracefully; returns at once, with the grace requests in flight get.

        ``grace`` None: the daemon's default. Only a client on the daemon's machine may ask (Forbidden).
        """
        return _number(_object(await self._request("POST", "/api/shutdown", _shutdown_body(grace)))["grace_seconds"])

    async def version(self) -> str:
        return str(_object(await self._request("GET", "/api/version"))["version"])

    async def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        try:
            response = await self._http.get("/metrics")
        except httpx.TransportError as exc:
            raise errors.DaemonUnavailable(f"no localrun daemon answers at {self.base_url} ({exc})") from exc
        if response.status_code >= 400:
            raise error_from(response.status_code, _json_or_text(response), response.headers)
        return response.text

    def generate(self, model: str, prompt: str, **fields: object) -> AsyncIterator[JSONObject]:
        """Stream /api/generate chunks; extra fields (system, options, keep_alive, format...) pass through."""
        return self._stream("/api/generate", _payload(model=model, prompt=prompt, stream=True, **fields))

    def chat(self, model: str, messages: Sequence[Mapping[str, object]], **fields: object,
             ) -> AsyncIterator[JSONObject]:
        return self._stream("/api/chat", _payload(model=model, messages=messages, stream=True, **fields))

    async def list(self) -> _Rows:
        return _rows(await self._request("GET", "/api/tags"), "models")

    async def show(self, model: str, verbose: bool = False) -> JSONObject:
        return _object(await self._request("POST", "/api/show", _payload(model=model, verbose=verbose or None)))

    def pull(self, model: str) -> AsyncIterator[JSONObject]:
        return self._stream("/api/pull", {"model": model, "stream": True})

    async def create(
        self, model: str, modelfile: str, base_dir: str | None = None, quantize: str | None = None,
    ) -> AsyncIterator[JSONObject]:
        """Create ``model`` from Modelfile text, yielding progress chunks; ``quantize`` (e.g. ``q4_K_M``)
        has the daemon quantize unquantized FROM weights on the way.

        The daemon reads no file of its machine for a create, so the files FROM and ADAPTER name
        (relative to ``base_dir``, the Modelfile's folder) are read here: each is checked, hashed
        and uploaded as a blob unless the daemon already holds it (:mod:`localrun.store.upload_plan`),
        and the daemon gets the Modelfile naming their digests.
        """
        from .store.upload_plan import hash_steps, plan_upload

        plan = plan_upload(modelfile, Path(base_dir) if base_dir else None)
        digests: dict[str, str] = {}
        for file in plan.files:
            digest = file.digest
            if digest is None:
                for done, hashed in hash_steps(file.path):
                    yield {"status": f"hashing {file.path.name}", "total": file.size, "completed": done}
                    digest = hashed
            assert digest is not None  # hash_steps ends with the digest
            if not await self.has_blob(digest):
                yield {"status": f"uploading {file.path.name}", "digest": digest, "total": file.size, "completed": 0}
                await self.push_blob(digest, file.path)
                yield {"status": f"uploading {file.path.name}", "digest": digest, "total": file.size,
                       "completed": file.size}
            digests[file.what] = digest
        text = plan.text(digests) if plan.files else modelfile
        body = _payload(model=model, modelfile=text, stream=True, quantize=quantize)
        async for chunk in self._stream("/api/create", body):  # noqa: UP028, RUF100
            yield chunk

    async def has_blob(self, digest: str) -> bool:
        """Whether the daemon holds blob ``digest`` (``sha256:<hex>``)."""
        try:
            await self._request("HEAD", f"/api/blobs/{digest}")
        except errors.NotFound:
            return False
        return True

    async def push_blob(self, digest: str, path: Path) -> None:
        """Upload the file at ``path`` as blob ``digest``; the daemon keeps it only if its bytes hash to it."""
        try:
            response = await self._http.post(f"/api/blobs/{digest}", content=self._file_body(path))
        except httpx.TransportError as exc:
            raise errors.DaemonUnavailable(f"no localrun daemon answers at {self.base_url} ({exc})") from exc
        if response.status_code >= 400:
            raise error_from(response.status_code, _json_or_text(response), response.headers)

    async def _file_body(self, path: Path) -> AsyncIterator[bytes]:
        from .store.upload_plan import file_chunks

        for block in file_chunks(path):  # noqa: UP028, RUF100 (the async twin cannot `yield from`)
            yield block

    async def copy(self, source: str, destination: str) -> None:
        await self._request("POST", "/api/copy", {"source": source, "destination": destination})

    async def delete(self, model: str) -> None:
        await self._request("DELETE", "/api/delete", {"model": model})

    async def ps(self) -> _Rows:
        return _rows(await self._request("GET", "/api/ps"), "models")

    async def pulls(self) -> _Rows:
        """Downloads under way in the daemon (whoever started them): model, status, completed, total."""
        return _rows(await self._request("GET", "/api/ps"), "pulls")

    async def upstreams(self) -> _Rows:
        """Each upstream member's state: upstream, url, state, in_flight, requests, errors, latency_ms..."""
        return _rows(await self._request("GET", "/api/ps"), "upstreams")

    async def stop(self, model: str) -> None:
        """Unload ``model`` now (after its in-flight requests finish)."""
        await self._request("POST", "/api/generate", {"model": model, "prompt": "", "keep_alive": 0})

    async def tokenize(self, model: str, content: str, add_special: bool = True) -> _Tokens:
        """``content`` as ``model``'s token ids (``add_special``: with the BOS a prompt gets)."""
        body = {"model": model, "content": content, "add_special": add_special}
        return [int(_number(t)) for t in _list(_object(await self._request("POST", "/api/tokenize", body))["tokens"])]

    async def detokenize(self, model: str, tokens: _Tokens) -> str:
        """Token ids of ``model`` as text (special tokens print nothing)."""
        reply = _object(await self._request("POST", "/api/detokenize", {"model": model, "tokens": tokens}))
        return str(reply["content"])

    async def embed(self, model: str, texts: Sequence[str], truncate: bool = True) -> JSONObject:
        """``/api/embed``: ``{embeddings, prompt_eval_count, truncated?}``, one vector per text."""
        return _object(await self._request("POST", "/api/embed", {"model": model, "input": list(texts),
                                                                  "truncate": truncate}))

    async def rerank(self, model: str, query: str, documents: Sequence[str], top_n: int | None = None) -> JSONObject:
        """``/v1/rerank``: ``{results: [{index, relevance_score, document}], usage, meta?}``, best first."""
        return _object(await self._request("POST", "/v1/rerank", _payload(model=model, query=query,
                                                                          documents=list(documents), top_n=top_n)))


# --- BEGIN GENERATED by scripts/render_sync_client.py from AsyncClient: do not edit ---


class Client:
    """Blocking twin of :class:`AsyncClient` (generated from it), for the CLI."""

    def __init__(
        self, base_url: str | None = None, *, api_key: str | None = None, timeout: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url or config.host().url
        self._http = httpx.Client(
            base_url=self.base_url, headers=_headers(api_key), timeout=httpx.Timeout(timeout, connect=5.0),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(
        self, method: str, path: str, body: Mapping[str, object] | None = None, timeout: float | None = None,
    ) -> JSONValue:
        try:
            response = self._http.request(
                method, path, json=body, timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout)
        except httpx.TransportError as exc:
            raise errors.DaemonUnavailable(f"no localrun daemon answers at {self.base_url} ({exc})") from exc
        if response.status_code >= 400:
            raise error_from(response.status_code, _json_or_text(response), response.headers)
        return _json_or_text(response) if response.content else {}

    def _stream(self, path: str, body: Mapping[str, object]) -> Iterator[JSONObject]:
        try:
            with self._http.stream("POST", path, json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_from(response.status_code, _json_or_text(response), response.headers)
                for line in response.iter_lines():
                    if not line.strip():
                        continue
                    chunk = _object(json.loads(line))
                    if "error" in chunk:
                        raise error_from(500, chunk)
                    yield chunk
        except httpx.TransportError as exc:
            raise errors.DaemonUnavailable(f"no localrun daemon answers at {self.base_url} ({exc})") from exc

    def is_running(self) -> bool:
        try:
            self._request("GET", "/health", timeout=PROBE_TIMEOUT_S)
        except errors.LocalrunError:
            return False
        return True

    def health(self) -> JSONObject:
        return _object(self._request("GET", "/health"))

    def status(self) -> DaemonStatus:
        """The daemon process: version, pid, start, log file, effective settings."""
        return DaemonStatus.from_json(_object(self._request("GET", "/api/status")))

    def shutdown(self, grace: float | None = None) -> float:
        """Ask the daemon to stop gracefully; returns at once, with the grace requests in flight get.

        ``grace`` None: the daemon's default. Only a client on the daemon's machine may ask (Forbidden).
        """
        return _number(_object(self._request("POST", "/api/shutdown", _shutdown_body(grace)))["grace_seconds"])

    def version(self) -> str:
        return str(_object(self._request("GET", "/api/version"))["version"])

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        try:
            response = self._http.get("/metrics")
        except httpx.TransportError as exc:
            raise errors.DaemonUnavailable(f"no localrun daemon answers at {self.base_url} ({exc})") from exc
        if response.status_code >= 400:
            raise error_from(response.status_code, _json_or_text(response), response.headers)
        return response.text

    def generate(self, model: str, prompt: str, **fields: object) -> Iterator[JSONObject]:
        """Stream /api/generate chunks; extra fields (system, options, keep_alive, format...) pass through."""
        return self._stream("/api/generate", _payload(model=model, prompt=prompt, stream=True, **fields))

    def chat(self, model: str, messages: Sequence[Mapping[str, object]], **fields: object,
             ) -> Iterator[JSONObject]:
        return self._stream("/api/chat", _payload(model=model, messages=messages, stream=True, **fields))

    def list(self) -> _Rows:
        return _rows(self._request("GET", "/api/tags"), "models")

    def show(self, model: str, verbose: bool = False) -> JSONObject:
        return _object(self._request("POST", "/api/show", _payload(model=model, verbose=verbose or None)))

    def pull(self, model: str) -> Iterator[JSONObject]:
        return self._stream("/api/pull", {"model": model, "stream": True})

    def create(
        self, model: str, modelfile: str, base_dir: str | None = None, quantize: str | None = None,
    ) -> Iterator[JSONObject]:
        """Create ``model`` from Modelfile text, yielding progress chunks; ``quantize`` (e.g. ``q4_K_M``)
        has the daemon quantize unquantized FROM weights on the way.

        The daemon reads no file of its machine for a create, so the files FROM and ADAPTER name
        (relative to ``base_dir``, the Modelfile's folder) are read here: each is checked, hashed
        and uploaded as a blob unless the daemon already holds it (:mod:`localrun.store.upload_plan`),
        and the daemon gets the Modelfile naming their digests.
        """
        from .store.upload_plan import hash_steps, plan_upload

        plan = plan_upload(modelfile, Path(base_dir) if base_dir else None)
        digests: dict[str, str] = {}
        for file in plan.files:
            digest = file.digest
            if digest is None:
                for done, hashed in hash_steps(file.path):
                    yield {"status": f"hashing {file.path.name}", "total": file.size, "completed": done}
                    digest = hashed
            assert digest is not None  # hash_steps ends with the digest
            if not self.has_blob(digest):
                yield {"status": f"uploading {file.path.name}", "digest": digest, "total": file.size, "completed": 0}
                self.push_blob(digest, file.path)
                yield {"status": f"uploading {file.path.name}", "digest": digest, "total": file.size,
                       "completed": file.size}
            digests[file.what] = digest
        text = plan.text(digests) if plan.files else modelfile
        body = _payload(model=model, modelfile=text, stream=True, quantize=quantize)
        for chunk in self._stream("/api/create", body):  # noqa: UP028, RUF100
            yield chunk

    def has_blob(self, digest: str) -> bool:
        """Whether the daemon holds blob ``digest`` (``sha256:<hex>``)."""
        try:
            self._request("HEAD", f"/api/blobs/{digest}")
        except errors.NotFound:
            return False
        return True

    def push_blob(self, digest: str, path: Path) -> None:
        """Upload the file at ``path`` as blob ``digest``; the daemon keeps it only if its bytes hash to it."""
        try:
            response = self._http.post(f"/api/blobs/{digest}", content=self._file_body(path))
        except httpx.TransportError as exc:
            raise errors.DaemonUnavailable(f"no localrun daemon answers at {self.base_url} ({exc})") from exc
        if response.status_code >= 400:
            raise error_from(response.status_code, _json_or_text(response), response.headers)

    def _file_body(self, path: Path) -> Iterator[bytes]:
        from .store.upload_plan import file_chunks

        for block in file_chunks(path):  # noqa: UP028, RUF100 (the async twin cannot `yield from`)
            yield block

    def copy(self, source: str, destination: str) -> None:
        self._request("POST", "/api/copy", {"source": source, "destination": destination})

    def delete(self, model: str) -> None:
        self._request("DELETE", "/api/delete", {"model": model})

    def ps(self) -> _Rows:
        return _rows(self._request("GET", "/api/ps"), "models")

    def pulls(self) -> _Rows:
        """Downloads under way in the daemon (whoever started them): model, status, completed, total."""
        return _rows(self._request("GET", "/api/ps"), "pulls")

    def upstreams(self) -> _Rows:
        """Each upstream member's state: upstream, url, state, in_flight, requests, errors, latency_ms..."""
        return _rows(self._request("GET", "/api/ps"), "upstreams")

    def stop(self, model: str) -> None:
        """Unload ``model`` now (after its in-flight requests finish)."""
        self._request("POST", "/api/generate", {"model": model, "prompt": "", "keep_alive": 0})

    def tokenize(self, model: str, content: str, add_special: bool = True) -> _Tokens:
        """``content`` as ``model``'s token ids (``add_special``: with the BOS a prompt gets)."""
        body = {"model": model, "content": content, "add_special": add_special}
        return [int(_number(t)) for t in _list(_object(self._request("POST", "/api/tokenize", body))["tokens"])]

    def detokenize(self, model: str, tokens: _Tokens) -> str:
        """Token ids of ``model`` as text (special tokens print nothing)."""
        reply = _object(self._request("POST", "/api/detokenize", {"model": model, "tokens": tokens}))
        return str(reply["content"])

    def embed(self, model: str, texts: Sequence[str], truncate: bool = True) -> JSONObject:
        """``/api/embed``: ``{embeddings, prompt_eval_count, truncated?}``, one vector per text."""
        return _object(self._request("POST", "/api/embed", {"model": model, "input": list(texts),
                                                                  "truncate": truncate}))

    def rerank(self, model: str, query: str, documents: Sequence[str], top_n: int | None = None) -> JSONObject:
        """``/v1/rerank``: ``{results: [{index, relevance_score, document}], usage, meta?}``, best first."""
        return _object(self._request("POST", "/v1/rerank", _payload(model=model, query=query,
                                                                          documents=list(documents), top_n=top_n)))


# --- END GENERATED ---
