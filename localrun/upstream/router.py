"""The daemon's upstreams: routing ``NAME/model``, failover before the handover, health checks.

:class:`Upstreams` owns the pools (rebuilt when the upstreams file or the environment's list
changes; members keep their state across a rebuild), one httpx client and a health-check task.

A request (:meth:`Upstreams.chat`, :meth:`~Upstreams.complete`) walks the pool's ranked members
(:meth:`.pool.Pool.order`): it sends the request and reads the reply up to its *handover* to the
caller, the one point after which its client may have received something:

- streamed (``stream=True``): the reply's first event (the client sees events as they come);
- not streamed: the reply's end (its client receives nothing before the whole answer).

Every failure before the handover moves on to the next member and cools the failed one down:
a connection error, a timeout, a 5xx or 429 answer, a reply that breaks or ends without its
final chunk. Nothing has reached the client, so no request is lost that had not started
streaming. Each member is tried at most once per request, cooling ones last, so a request makes
at most as many attempts as its pool has members. A 4xx answer is the request's own fault and
is raised at once (as InvalidRequest or ModelNotFound, with the upstream's message), and so is a 501
(the member lacks what was asked, e.g. llama-server started without ``--rerank``). After the
handover the :class:`UpstreamReply` is the caller's: a failure ends it with an UpstreamError
(the member is cooled down too), which every API writes as its stream's own error event.

This is the one place that decides whether a failure is retried; :mod:`.reply` only reports.

Each member is checked (``GET /v1/models`` or ``/api/tags``, which also says which API it
speaks and which models it serves: :meth:`Upstreams.probe`) when first needed, then as
:mod:`.health` schedules it. Everything runs on the daemon's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import httpx

from .. import errors
from ..chat.events import ChatEvent
from ..engine.types import DoneEvent, EmbedResult, RerankResult
from ..jsontypes import JSONValue, loads
from . import ollama_api, openai_api, registry, transport
from .health import CHECK_INTERVAL_S, HealthChecks
from .pool import Member, MemberState, Pool, latency_ms
from .reply import Decoder, Retry, UpstreamReply, batches, empty
from .requests import ChatRequest, CompletionRequest, EmbedRequest, RerankRequest
from .spec import Api, UpstreamSpec

log = logging.getLogger("localrun.upstream")

RELOAD_EVERY_S = 1.0
KeyLookup = Callable[[str], str | None]  # environment variable name -> its value
_T = TypeVar("_T")


class _NothingCanAsk(Exception):
    """Every member serving the model was passed over: none can take the request (Upstreams._ask)."""


@dataclass(frozen=True, slots=True)
class Route:
    """A model name that names an upstream: ``upstream/model``."""

    upstream: str
    model: str

    @property
    def name(self) -> str:
        return f"{self.upstream}/{self.model}"


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    """One member's state for ``/api/ps`` and ``/metrics`` (no key, only its variable's name)."""

    upstream: str
    url: str
    api: str | None
    state: str
    in_flight: int
    requests: int
    failures: int
    latency_ms: float | None
    cooling_s: float
    last_error: str | None
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListedModel:
    name: str        # upstream/model
    upstream: str
    model: str
    hosts: tuple[str, ...]  # member URLs serving it


class Upstreams:
    """Every configured upstream of one daemon (see the module docstring)."""

    def __init__(self, env_specs: Sequence[UpstreamSpec] = (), file: Path | None = None, *,
                 api_key: KeyLookup = os.environ.get, transport_: httpx.AsyncBaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._env_specs = tuple(env_specs)
        self._file = file
        self._api_key = api_key
        self._transport = transport_
        self._client: httpx.AsyncClient | None = None
        self.clock = clock
        self.pools: dict[str, Pool] = {}
        self._specs: tuple[UpstreamSpec, ...] | None = None
        self._file_stamp: tuple[int, int] | None = None
        self._reload_at = -1e9
        self.health = HealthChecks(self.probe, self._members, clock)
        self.reload(force=True)

    # -- configuration -------------------------------------------------------------------------

    def reload(self, force: bool = False) -> None:
        """Rebuild the pools when the file or the list changed (checked at most every RELOAD_EVERY_S)."""
        now = self.clock()
        if not force and now - self._reload_at < RELOAD_EVERY_S:
            return
        self._reload_at = now
        stamp = None
        if self._file is not None:
            try:
                st = self._file.stat()
                stamp = (st.st_mtime_ns, st.st_size)
            except OSError:
                stamp = None
        if not force and stamp == self._file_stamp:
            return
        self._file_stamp = stamp
        try:
            from_file = registry.load(self._file) if self._file is not None else ()
        except errors.LocalrunError as exc:
            log.error("upstreams file ignored: %s", exc)
            from_file = ()
        specs = self._env_specs + tuple(s for s in from_file if s not in self._env_specs)
        if specs == self._specs:
            return
        self._specs = specs
        old = {(m.spec.name, m.url): m for p in self.pools.values() for m in p.members}
        pools: dict[str, Pool] = {}
        for spec in specs:
            kept = old.get((spec.name, spec.url))
            member = kept if kept is not None and kept.spec == spec else Member(spec)
            pool = pools.setdefault(spec.name, Pool(spec.name, []))
            pool.members.append(member)
            if spec.name in self.pools:  # keep what the pool learnt about conversations
                pool._affinity = self.pools[spec.name]._affinity
        self.pools = pools
        if pools:
            log.info("upstreams: %s", ", ".join(f"{n} ({len(p.members)} member{'s' if len(p.members) != 1 else ''})"
                                               for n, p in pools.items()))

    def route(self, model: object) -> Route | None:
        """``NAME/model`` with NAME a configured upstream (it wins over an Ollama namespace), else None."""
        if not isinstance(model, str) or "/" not in model:
            return None
        self.reload()
        name, _, rest = model.strip().partition("/")
        if name in self.pools and rest:
            return Route(name, rest)
        return None

    # -- requests ------------------------------------------------------------------------------

    async def chat(self, route: Route, req: ChatRequest, keys: Sequence[bytes] = (), *,
                   stream: bool = True) -> UpstreamReply:
        """Start a chat reply on the best member serving ``route.model``, failing over until its
        handover: its first event when ``stream``, else its end (then it is read whole and
        ``done`` is already set)."""

        def build(member: Member, model: str) -> tuple[str, dict[str, object], Decoder]:
            r = replace(req, model=model)
            if member.api is Api.OLLAMA:
                return ollama_api.CHAT_PATH, ollama_api.chat_body(r), ollama_api.StreamDecoder()
            return openai_api.CHAT_PATH, openai_api.chat_body(r), openai_api.StreamDecoder()

        return await self._start(route, build, keys, stream)

    async def complete(self, route: Route, req: CompletionRequest, keys: Sequence[bytes] = (), *,
                       stream: bool = True) -> UpstreamReply:
        """Start a raw-prompt completion (``/v1/completions`` or ``/api/generate`` with raw), handed
        over as :meth:`chat` says."""

        def build(member: Member, model: str) -> tuple[str, dict[str, object], Decoder]:
            r = replace(req, model=model)
            if member.api is Api.OLLAMA:
                return ollama_api.GENERATE_PATH, ollama_api.generate_body(r), ollama_api.StreamDecoder()
            return openai_api.COMPLETION_PATH, openai_api.completion_body(r), openai_api.StreamDecoder()

        return await self._start(route, build, keys, stream)

    async def embed(self, route: Route, req: EmbedRequest) -> EmbedResult:
        """Embeddings from the best member (failover on connection errors and 5xx, like replies)."""

        def ask(member: Member) -> tuple[str, dict[str, object]]:
            r = replace(req, model=member.serves(route.model) or route.model)
            if member.api is Api.OLLAMA:
                return ollama_api.EMBED_PATH, ollama_api.embed_body(r)
            return openai_api.EMBED_PATH, openai_api.embed_body(r)

        def read(member: Member, payload: JSONValue) -> EmbedResult:
            if member.api is Api.OLLAMA:
                return ollama_api.embeddings(payload, len(req.inputs))
            return openai_api.embeddings(payload, len(req.inputs))

        return await self._ask(route, ask, read)

    async def rerank(self, route: Route, req: RerankRequest) -> RerankResult:
        """Scores from the best member that speaks ``/v1`` (Ollama's ``/api`` has no reranking: such
        members are passed over, not cooled down; a pool of only those is UnsupportedCapability)."""

        def ask(member: Member) -> tuple[str, dict[str, object]]:
            r = replace(req, model=member.serves(route.model) or route.model)
            return openai_api.RERANK_PATH, openai_api.rerank_body(r)

        def read(member: Member, payload: JSONValue) -> RerankResult:
            return openai_api.rerank_result(payload, len(req.documents))

        try:
            return await self._ask(route, ask, read, takes=lambda member: member.api is Api.OPENAI)
        except _NothingCanAsk:
            raise errors.UnsupportedCapability(
                f"upstream {route.upstream} speaks Ollama's API, which has no reranking: "
                "only /v1 upstreams (llama-server --rerank, vLLM, localrun) rerank") from None

    async def shown(self, route: Route) -> ollama_api.Shown | None:
        """What an Ollama-API member's ``/api/show`` says of the model (capabilities, details); None
        where no member speaks Ollama's API (a ``/v1`` server does not say) or it does not say either."""

        def ask(member: Member) -> tuple[str, dict[str, object]]:
            return ollama_api.SHOW_PATH, {"model": member.serves(route.model) or route.model}

        try:
            return await self._ask(route, ask, lambda _member, payload: ollama_api.shown(payload),
                                   takes=lambda member: member.api is Api.OLLAMA)
        except _NothingCanAsk:
            return None

    async def _ask(self, route: Route, ask: Callable[[Member], tuple[str, dict[str, object]]],
                   read: Callable[[Member, JSONValue], _T],
                   takes: Callable[[Member], bool] = lambda _member: True) -> _T:
        """One JSON request (``ask``: its path and body for a member) answered by the best member
        that ``takes`` it, ``read`` from its whole reply; failover on connection errors, 5xx and
        replies ``read`` refuses, like a reply before its handover. _NothingCanAsk when no member
        takes it (and none failed its check)."""
        pool = self._pool(route)
        failures: list[str] = []
        tried: set[str] = set()
        while (member := await self._next(pool, route, (), tried, failures, takes)) is not None:
            path, body = ask(member)
            started = self.clock()
            try:
                response = await self._send(member, path, body)
                try:
                    payload = await transport.read_json(response)
                finally:
                    await response.aclose()
                result = read(member, payload)
            except Retry as exc:
                self._retry(member, exc, failures)
                continue
            except (httpx.HTTPError, errors.UpstreamError) as exc:
                self._retry(member, Retry(self.describe(member, exc)), failures)
                continue
            finally:
                member.end()
            member.succeeded(self.clock() - started)
            return result
        if not tried and not failures:
            raise _NothingCanAsk
        raise self._unavailable(pool, route, failures)

    async def _start(self, route: Route, build: Callable[[Member, str], tuple[str, dict[str, object], Decoder]],
                     keys: Sequence[bytes], stream: bool) -> UpstreamReply:
        """The request ``build`` makes for each member, on one member after another until one
        reaches the handover (see the module docstring); UpstreamUnavailable when none does."""
        pool = self._pool(route)
        failures: list[str] = []
        tried: set[str] = set()
        while (member := await self._next(pool, route, keys, tried, failures)) is not None:
            started = self.clock()
            try:  # building the body may refuse the request (what this member's API cannot carry)
                path, body, decoder = build(member, member.serves(route.model) or route.model)
                reply = await self._open_any(pool, member, path, body, decoder, started, stream)
            except Retry as exc:
                member.end()
                self._retry(member, exc, failures)
                continue
            except BaseException:
                member.end()
                raise
            member.succeeded(reply.first_at - started)
            pool.remember(keys, member)
            return reply
        raise self._unavailable(pool, route, failures)

    def _pool(self, route: Route) -> Pool:
        pool = self.pools.get(route.upstream)
        if pool is None:  # removed from the config since the route was made
            raise errors.ModelNotFound(f"no upstream named {route.upstream!r} is configured")
        return pool

    async def _next(self, pool: Pool, route: Route, keys: Sequence[bytes], tried: set[str],
                    failures: list[str], takes: Callable[[Member], bool] = lambda _member: True) -> Member | None:
        """The best member not tried yet that ``takes`` the request, already counted in flight
        (``begin``); None when every member was tried or passed over. Members whose API is not known
        yet are checked first, so that choosing and ``begin`` happen with no await between them
        (concurrent requests see each other's load)."""
        if not pool.serving(route.model):
            served = ", ".join(pool.models()[:20]) or "nothing listed yet"
            raise errors.ModelNotFound(f"model {route.model!r} is not served by upstream {pool.name} "
                                       f"(it serves: {served})")
        unknown = [m for m in pool.serving(route.model) if m.api is None and m.url not in tried]
        if unknown:
            await asyncio.gather(*(self.check(m) for m in unknown))
            for m in unknown:
                if m.api is None:
                    tried.add(m.url)
                    failures.append(f"{m.url}: {m.last_error or 'no answer'}")
        for member in pool.order(route.model, self.clock(), keys):
            if member.url not in tried and member.api is not None and takes(member):
                tried.add(member.url)
                member.begin()
                return member
        return None

    def _retry(self, member: Member, exc: Retry, failures: list[str]) -> None:
        failures.append(f"{member.url}: {exc.reason}")
        member.failed(self.clock(), exc.reason)
        log.warning("upstream %s (%s) failed before answering, trying the next member: %s",
                    member.spec.name, member.url, exc.reason)

    def _unavailable(self, pool: Pool, route: Route, failures: list[str]) -> errors.UpstreamError:
        detail = "; ".join(failures[-4:]) or "every member is cooling down"
        return errors.UpstreamUnavailable(f"no member of upstream {pool.name} could serve {route.model!r}: {detail}")

    def _key(self, member: Member) -> str | None:
        variable = member.spec.api_key_env
        if not variable:
            return None
        key = self._api_key(variable)
        if not key:
            raise Retry(f"its key variable {variable} is not set in the daemon's environment")
        return key

    def describe(self, member: Member, exc: BaseException) -> str:
        """A short reason for a log or an error, with the member's key redacted."""
        text = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TimeoutException):
            text = f"timed out ({type(exc).__name__})"
        elif isinstance(exc, httpx.ConnectError):
            text = f"cannot connect ({text})"
        variable = member.spec.api_key_env
        return transport.redact(text, [self._api_key(variable) if variable else None])

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = transport.new_client(self._transport)
        return self._client

    async def _send(self, member: Member, path: str, body: dict[str, object],
                    timeout: httpx.Timeout | None = None) -> httpx.Response:
        """POST ``body``; the open response when it is 2xx. Raises Retry (connection, 5xx, 429) or
        the request's own error (4xx)."""
        key = self._key(member)
        headers = transport.request_headers(key)
        client = self.client()
        request = client.build_request("POST", member.url + path, json=body, headers=headers,
                                       timeout=timeout or transport.REQUEST_TIMEOUT)
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise Retry(self.describe(member, exc)) from None
        if response.status_code < 300:
            return response
        try:
            message = transport.redact(await transport.error_text(response), [key])
        finally:
            await response.aclose()
        status = response.status_code
        where = f"upstream {member.spec.name}"
        if status == 501:  # it lacks the feature (llama-server without --rerank): not a failing member
            raise errors.UnsupportedCapability(f"{where}: {message or 'not implemented'}")
        if status >= 500 or status == 429:
            raise Retry(f"HTTP {status}: {message}", busy=status == 429)
        if status in (401, 403):
            raise Retry(f"HTTP {status}: it refused localrun's credentials (see --api-key-env)")
        if status == 404:
            raise errors.ModelNotFound(f"{where}: {message or 'not found'}")
        if status == 413:
            raise errors.PayloadTooLarge(f"{where}: {message or 'request too large'}")
        raise errors.InvalidRequest(f"{where}: {message or f'HTTP {status}'}")

    async def _open_any(self, pool: Pool, member: Member, path: str, body: dict[str, object], decoder: Decoder,
                        started: float, stream: bool) -> UpstreamReply:
        """:meth:`_open`, and once more with the older structured-output form when a /v1 server
        refuses OpenAI's ``json_schema`` response_format (llama-cpp-python's server does)."""
        legacy = openai_api.legacy_schema_body(body) if member.api is Api.OPENAI else None
        try:
            return await self._open(pool, member, path, body, decoder, started, stream)
        except (Retry, errors.InvalidRequest) as exc:
            if legacy is None or "response_format" not in str(exc):
                raise
            log.info("upstream %s (%s) refused a json_schema response_format; sending the schema as "
                     "json_object's", member.spec.name, member.url)
        return await self._open(pool, member, path, legacy, decoder, started, stream)

    async def _open(self, pool: Pool, member: Member, path: str, body: dict[str, object], decoder: Decoder,
                    started: float, stream: bool) -> UpstreamReply:
        """Send the request to ``member`` and read its reply up to the handover (its first event
        when ``stream``, else its end). Raises Retry for every failure on the way."""
        response = await self._send(member, path, body)
        source = transport.sse_data(response) if member.api is Api.OPENAI else transport.lines(response)
        chunks = batches(source, decoder)
        done: DoneEvent | None = None
        try:
            first: list[ChatEvent] = []
            async for batch in chunks:
                if batch:
                    first = list(batch)
                    break
            else:  # the whole reply came and held no event (an empty answer): still a success
                chunks = empty()
            first_at = self.clock()
            if not stream:  # its client waits for the whole answer: a break anywhere is retried
                async for batch in chunks:
                    first.extend(batch)
                chunks = empty()
                done = decoder.done(int((first_at - started) * 1e9), int((self.clock() - first_at) * 1e9))
        except (httpx.HTTPError, errors.UpstreamError) as exc:
            await response.aclose()
            raise Retry(self.describe(member, exc)) from None
        except BaseException:
            await response.aclose()
            raise
        return UpstreamReply(pool, member, response, chunks, first, decoder, started, first_at,
                             clock=self.clock, describe=self.describe, done=done)

    # -- health ----------------------------------------------------------------------------------

    async def check(self, member: Member) -> None:
        """Ask ``member`` for its models (learning its API); one check at a time per member."""
        await self.health.check(member)

    async def probe(self, member: Member) -> None:
        """One check of ``member``: which API it speaks and which models it serves (call :meth:`check`)."""
        apis = [member.api] if member.api is not None else [Api.OPENAI, Api.OLLAMA]
        reason = "no answer"
        for api in apis:
            path = openai_api.MODELS_PATH if api is Api.OPENAI else ollama_api.MODELS_PATH
            try:
                headers = transport.request_headers(self._key(member))
                response = await self.client().get(member.url + path, headers=headers,
                                                   timeout=transport.PROBE_TIMEOUT)
                if response.status_code in (401, 403):
                    reason = f"HTTP {response.status_code}: it refused localrun's credentials (see --api-key-env)"
                    continue
                if response.status_code != 200:
                    reason = f"GET {path} answered HTTP {response.status_code}"
                    continue
                if len(response.content) > transport.MAX_JSON_BYTES:
                    reason = f"GET {path} answered more than {transport.MAX_JSON_BYTES} bytes"
                    continue
                payload = loads(response.content)
                listed = openai_api.model_ids(payload) if api is Api.OPENAI else ollama_api.model_names(payload)
            except Retry as exc:
                reason = exc.reason
                continue
            except (httpx.HTTPError, ValueError, errors.UpstreamError) as exc:
                reason = self.describe(member, exc)
                continue
            was_cooling = member.state(self.clock()) is MemberState.COOLING
            member.checked(self.clock(), api, tuple(listed))
            if was_cooling:
                log.info("upstream %s (%s) answers again", member.spec.name, member.url)
            return
        member.check_failed(self.clock(), reason)

    async def refresh(self, stale_after: float = CHECK_INTERVAL_S) -> None:
        """Check (concurrently) every member not checked within ``stale_after`` seconds."""
        await self.health.refresh(stale_after)

    def start(self) -> None:
        """Start the background health checks."""
        self.health.start()

    async def close(self) -> None:
        await self.health.close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _members(self) -> list[Member]:
        """Every member of the current pools (after picking up a changed configuration)."""
        self.reload()
        return [m for p in self.pools.values() for m in p.members]

    # -- what the daemon shows -----------------------------------------------------------------

    def snapshot(self) -> list[MemberSnapshot]:
        now = self.clock()
        out = []
        for pool in self.pools.values():
            for m in pool.members:
                out.append(MemberSnapshot(
                    upstream=pool.name, url=m.url, api=m.api.value if m.api else None, state=m.state(now).value,
                    in_flight=m.in_flight, requests=m.requests, failures=m.failures, latency_ms=latency_ms(m),
                    cooling_s=max(0.0, m.cool_until - now), last_error=m.last_error, models=m.models() or (),
                ))
        return out

    def listed(self) -> list[ListedModel]:
        """Every ``upstream/model`` some member serves (known lists; :meth:`refresh` first for fresh ones)."""
        out = []
        for pool in self.pools.values():
            for model in pool.models():
                hosts = tuple(m.url for m in pool.members if m.serves(model) is not None)
                out.append(ListedModel(f"{pool.name}/{model}", pool.name, model, hosts))
        return out
