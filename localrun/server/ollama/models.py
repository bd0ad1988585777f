"""Model management routes, backed by the store: tags, show, pull, create, copy, delete, blobs.

The store's calls block (hashing, downloading), so they run in worker threads; progress reports
(``localrun.store.progress.Progress``) cross back to the event loop through a queue and are
streamed as NDJSON in Ollama's shape (``status``, ``digest``, ``total``, ``completed``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from ... import errors
from ...chat.format import capabilities, describe
from ...hardware.memory import read_geometry
from ...jsontypes import JSONMapping, JSONObject
from ...store.blobs import BlobStore
from ...store.model_store import ModelStore
from ...store.modelfile import quote as _quote
from ...store.progress import Progress, ProgressFn
from ...store.quantize import quant_type
from ...store.records import ModelEntry
from .. import remote
from ..chat import upstream_route
from ..executors import run_in
from ..http import NDJSONStream, get, json_reply, read_json
from ..keys import EXECUTORS, PULLS, SERVICE, STORE
from ..options import merge_options
from ..status import details

log = logging.getLogger(__name__)


def _iso(modified: float) -> str:
    """A store timestamp (seconds since the epoch) as Ollama's ``modified_at``."""
    return dt.datetime.fromtimestamp(modified, dt.UTC).isoformat()


def _details_for(path: Path | str | None) -> JSONObject:
    try:
        return details(read_geometry(str(path))) if path else {"format": "gguf"}
    except errors.LocalrunError:
        return {"format": "gguf"}


def tag_entry(item: ModelEntry, store: ModelStore) -> JSONObject:
    """One /api/tags row; the details come from the GGUF header the name resolves to."""
    try:
        path: Path | None = store.resolve(item.name).model_path
    except errors.LocalrunError:
        path = None
    return {
        "name": item.name,
        "model": item.name,
        "modified_at": _iso(item.modified),
        "size": item.size,
        "digest": item.digest.removeprefix("sha256:"),
        "details": _with_vision(_details_for(path), item.vision),
    }


def _with_vision(details: JSONObject, vision: bool) -> JSONObject:
    """Ollama marks a vision model by the ``clip`` family (its projector's architecture)."""
    families = details.get("families")
    if vision and isinstance(families, list) and "clip" not in families:
        details["families"] = [*families, "clip"]
    return details


async def tags(request: web.Request) -> web.Response:
    store = request.app[STORE]

    def listing() -> list[JSONObject]:  # resolving may hash changed weights: never on the loop
        return [tag_entry(i, store) for i in store.list()]

    models = await run_in(request.app[EXECUTORS].store, listing)
    upstreams = remote.upstreams_for(request.app[SERVICE].upstreams)
    if upstreams is not None:  # NAME/model rows, with Ollama's remote_model / remote_host fields
        models += await remote.tag_entries(upstreams)
    return json_reply({"models": models})


def _parameters_text(params: JSONMapping) -> str:
    lines = []
    for key, value in params.items():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            text = json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
            lines.append(f"{key:<30} {text}")
    return "\n".join(lines)


async def show(request: web.Request) -> web.Response:
    """Ollama's show: modelfile, parameters (text), template, system, license, details, model_info."""
    body: JSONObject = await read_json(request)
    name = get(body, "model", str) or get(body, "name", str)
    if not name:
        raise errors.InvalidRequest("'model' is required")
    service = request.app[SERVICE]
    route = upstream_route(service, name)
    if route is not None and service.upstreams is not None:
        return json_reply(await remote.show(service.upstreams, route))
    info = await asyncio.to_thread(request.app[STORE].show, name)
    template = info.template or ""
    out: JSONObject = {
        "modelfile": info.modelfile,
        "parameters": _parameters_text(info.parameters),
        "template": template,
        "system": info.system or "",
        "license": "\n".join(info.licenses),
        "details": info.details or _details_for(info.model_path),
        "model_info": info.model_info,
        "capabilities": [*_capabilities(template, info.model_path, vision=info.projector_path is not None)],
        "defaults": await _defaults(request, name, info.parameters),
        "modified_at": _iso(info.modified),
    }
    if info.messages:
        out["messages"] = [{"role": m.role, "content": m.content} for m in info.messages]
    return json_reply(out)


def _capabilities(template: str, path: Path, *, vision: bool) -> list[str]:
    """What the model can do, from its template and GGUF header (see :func:`localrun.chat.format.capabilities`)."""
    try:
        geometry = read_geometry(str(path))
    except errors.LocalrunError:
        return ["completion"]
    return capabilities(describe(template or None), kind=geometry.kind, fim=geometry.fim is not None,
                        vision=vision)


async def _defaults(request: web.Request, name: str, params: JSONMapping) -> JSONObject:
    """What a request without options gets (Modelfile PARAMETERs over the engine's defaults, the
    context planned from memory: ``Service.target``), and the KV pool requests share.

    A localrun field (Ollama's ``parameters`` lists only what the Modelfile sets); the chat UI
    shows these in its settings dialog. When the model cannot load (too large for memory, a bad
    file), ``unavailable`` says why and the numbers are the Modelfile's, not a plan.
    """
    unavailable = None
    try:
        target = await request.app[SERVICE].target(name)
        load, sampling = target.spec.options, target.sampling
    except errors.LocalrunError as exc:  # a model that cannot load still shows its Modelfile's values
        load, sampling, _ = merge_options(params, {})
        unavailable = f"these are the Modelfile's values: the model cannot load as it is ({exc.message})"
    return {
        **({"unavailable": unavailable} if unavailable else {}),
        "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
        "min_p": sampling.min_p, "repeat_penalty": sampling.repeat_penalty, "num_ctx": load.num_ctx,
        "context_pool": load.pool, "num_parallel": load.num_parallel,
        "num_predict": sampling.num_predict if sampling.num_predict is not None else -1,
        "seed": sampling.seed, "stop": list(sampling.stop),
    }


async def _run_with_progress(request: web.Request, stream: bool,
                             work: Callable[[ProgressFn], object]) -> web.StreamResponse:
    """Run blocking ``work(progress_cb)`` on the transfer pool, streaming its progress reports.

    When the client goes away, the next progress report raises Cancelled inside ``work``, so the
    hashing or download done for nobody stops (the store rolls back; a partial download is kept).
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[JSONObject | None] = asyncio.Queue()
    gone = threading.Event()

    def progress(p: Progress) -> None:
        if gone.is_set():
            raise errors.Cancelled("the client went away")
        report = {k: v for k, v in dataclasses.asdict(p).items() if v is not None and k != "rate"}
        loop.call_soon_threadsafe(queue.put_nowait, report)

    def finished(task: asyncio.Future[object]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved here: when the client has left, nobody else reads it
        loop.call_soon_threadsafe(queue.put_nowait, None)

    task = asyncio.ensure_future(run_in(request.app[EXECUTORS].transfers, work, progress))
    task.add_done_callback(finished)
    try:
        return await _respond_with_progress(request, stream, task, queue)
    except BaseException:
        gone.set()
        raise


async def _respond_with_progress(request: web.Request, stream: bool, task: asyncio.Future[object],
                                 queue: asyncio.Queue[JSONObject | None]) -> web.StreamResponse:
    if not stream:
        await asyncio.shield(task)  # raises the store's error as a proper HTTP error
        return json_reply({"status": "success"})
    out = NDJSONStream(request)
    last_status = None
    while True:
        report = await queue.get()
        if report is None:
            break
        last_status = report.get("status")
        await out.write(report)
    try:
        await task
    except errors.LocalrunError as exc:
        if not out.response.prepared:
            raise
        await out.write({"error": exc.message, "code": exc.code})
        return await out.finish()
    except Exception:  # a bug mid-stream: a 500 written into the chunked stream would garble it for the client
        if not out.response.prepared:
            raise
        log.exception("%s %s failed mid-stream", request.method, request.path)
        await out.write({"error": "internal error (see the server log)", "code": "internal_error"})
        return await out.finish()
    if last_status != "success":
        await out.write({"status": "success"})
    return await out.finish()


async def pull(request: web.Request) -> web.StreamResponse:
    body: JSONObject = await read_json(request)
    name = get(body, "model", str) or get(body, "name", str)
    if not name:
        raise errors.InvalidRequest("'model' is required")
    stream = get(body, "stream", bool, True)
    store = request.app[STORE]
    from ...store.pull import pull as store_pull  # lazily: the hub client is heavy to import
    pulls = request.app[PULLS]

    def work(progress: ProgressFn) -> object:
        def report(p: Progress) -> None:
            pulls[name] = {"model": name, "status": p.status, "completed": p.completed, "total": p.total}
            progress(p)

        pulls[name] = {"model": name, "status": "pulling manifest"}
        try:
            return store_pull(store, name, progress=report)
        finally:
            pulls.pop(name, None)

    return await _run_with_progress(request, stream, work)


def modelfile_from_request(body: JSONObject) -> str:
    """Ollama's structured create request (from, files, parameters...) as Modelfile text.

    ``files`` and ``adapters`` map file names to blob digests (uploaded to /api/blobs first);
    the Modelfile names those digests, which the store resolves (and refuses when absent).
    """
    lines: list[str] = []
    source = get(body, "from", str)
    files = get(body, "files", dict, {})
    if files:
        gguf = [d for f, d in files.items() if str(f).endswith(".gguf")] or list(files.values())
        if len(gguf) != 1:
            raise errors.InvalidRequest("'files' must hold exactly one .gguf file")
        source = _digest(str(gguf[0]))
    if not source:
        raise errors.InvalidRequest(
            "create needs 'from' (a model name or hf.co reference), 'files' (uploaded blobs) or a 'modelfile'")
    lines.append(f"FROM {source}")
    for digest in (get(body, "adapters", dict, {}) or {}).values():
        lines.append(f"ADAPTER {_digest(str(digest))}")
    for key, value in (get(body, "parameters", dict, {}) or {}).items():
        for v in value if isinstance(value, list) else [value]:
            lines.append(f"PARAMETER {key} "
                         f"{json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else v}")
    template, system = get(body, "template", str), get(body, "system", str)
    if template:
        lines.append(f"TEMPLATE {_quote(template)}")
    if system:
        lines.append(f"SYSTEM {_quote(system)}")
    license_ = body.get("license")
    licenses = [license_] if isinstance(license_, str) else license_ or []
    if not isinstance(licenses, (list, dict)):  # a number or true: no text (iterating it was a 500)
        raise errors.InvalidRequest("'license' must be a string or a list of strings")
    for text in licenses:
        lines.append(f"LICENSE {_quote(str(text))}")
    for m in get(body, "messages", list, []) or []:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise errors.InvalidRequest("'messages' must be a list of {role, content}")
        lines.append(f"MESSAGE {m['role']} {_quote(str(m.get('content', '')))}")
    return "\n".join(lines) + "\n"


async def create(request: web.Request) -> web.StreamResponse:
    body: JSONObject = await read_json(request)
    name = get(body, "model", str) or get(body, "name", str)
    if not name:
        raise errors.InvalidRequest("'model' is required")
    quantize = get(body, "quantize", str) or None
    if quantize is not None:
        quant_type(quantize)  # a bad type is a 400 before anything streams
    store = request.app[STORE]
    # Ollama's legacy ``path`` (the Modelfile's place on the server) is ignored: over the API,
    # FROM and ADAPTER name models, hf.co references or uploaded blobs, never server files.
    modelfile = get(body, "modelfile", str) or modelfile_from_request(body)
    stream = get(body, "stream", bool, True)
    from ...store.pull import hub_hook  # lazily: the hub client is heavy to import

    hook = hub_hook(store)  # resolves ``FROM hf.co/...`` names
    return await _run_with_progress(
        request, stream,
        lambda cb: store.create(name, modelfile, local_files=False, progress=cb, from_hook=hook, quantize=quantize),
    )


async def copy(request: web.Request) -> web.Response:
    body: JSONObject = await read_json(request)
    source, destination = get(body, "source", str), get(body, "destination", str)
    if not source or not destination:
        raise errors.InvalidRequest("'source' and 'destination' are required")
    await asyncio.to_thread(request.app[STORE].copy, source, destination)
    return web.Response(status=200)


async def delete(request: web.Request) -> web.Response:
    body: JSONObject = await read_json(request)
    name = get(body, "model", str) or get(body, "name", str)
    if not name:
        raise errors.InvalidRequest("'model' is required")
    store = request.app[STORE]
    stored = await asyncio.to_thread(store.stored_name, name)  # 404 "not in the store" for unknown models
    await request.app[SERVICE].scheduler.unload(stored)
    await asyncio.to_thread(store.remove, stored)
    return web.Response(status=200)


def _blobs(store: ModelStore) -> BlobStore:
    return store.blobs


def _digest(raw: str) -> str:
    from ...store.blobs import normalize_digest

    try:
        return normalize_digest(raw)
    except Exception:
        raise errors.InvalidRequest(f"{raw!r} is not a sha256 digest") from None


async def blob_head(request: web.Request) -> web.Response:
    d = _digest(request.match_info["digest"])
    return web.Response(status=200 if _blobs(request.app[STORE]).has(d) else 404)


async def blob_upload(request: web.Request) -> web.Response:
    """Store the body as blob ``digest`` once its bytes hash to it.

    A blob already present is replaced by the uploaded bytes (once they verify): uploading the
    right bytes again is how a client repairs a blob that rotted on disk. 201 when new, 200 when
    it replaced a stored one.
    """
    d = _digest(request.match_info["digest"])
    blobs = _blobs(request.app[STORE])
    pool = request.app[EXECUTORS].store
    existed = blobs.has(d)
    writer = await run_in(pool, blobs.writer)
    try:
        async for chunk in request.content.iter_chunked(1 << 20):
            await run_in(pool, writer.write, chunk)
        await run_in(pool, writer.commit, d)
    except errors.CorruptBlob as exc:
        writer.abort()
        raise errors.InvalidRequest(f"uploaded bytes do not match {d}: {exc}") from None
    except BaseException:
        writer.abort()
        raise
    return web.Response(status=200 if existed else 201)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/tags", tags)
    app.router.add_post("/api/show", show)
    app.router.add_post("/api/pull", pull)
    app.router.add_post("/api/create", create)
    app.router.add_post("/api/copy", copy)
    app.router.add_delete("/api/delete", delete)
    app.router.add_route("HEAD", "/api/blobs/{digest}", blob_head)
    app.router.add_post("/api/blobs/{digest}", blob_upload)
