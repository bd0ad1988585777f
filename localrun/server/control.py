"""Routes about the daemon itself (localrun extensions): ``GET /api/status`` and ``POST /api/shutdown``.

``/api/status`` says which process answers and how it was started: version, pid, start time,
address, log file, and its effective settings (``Settings.report()``, so the CLI can tell the
user when its own ``LOCALRUN_*`` values differ). ``/api/shutdown`` asks for a graceful stop
(:mod:`.lifecycle`); only a client on this machine may ask, whatever the API key says.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time

from aiohttp import web

from .. import __version__
from ..errors import Forbidden, InvalidRequest
from .http import get, iso, json_reply, read_json
from .keys import DAEMON, SETTINGS, SHUTDOWN, STARTED_AT
from .lifecycle import MAX_GRACE_S


async def status(request: web.Request) -> web.Response:
    daemon, settings = request.app[DAEMON], request.app[SETTINGS]
    uptime = asyncio.get_running_loop().time() - request.app[STARTED_AT]
    return json_reply({
        "version": __version__,
        "pid": daemon.pid,
        "started_at": iso(daemon.started_at),
        "uptime_seconds": round(uptime if request.app[STARTED_AT] else time.time() - daemon.started_at, 3),
        "address": settings.host.url,
        "log_file": str(daemon.log_file) if daemon.log_file else None,
        "log_offset": daemon.log_offset,
        "settings": settings.report(),
    })


def _is_local_peer(request: web.Request) -> bool:
    try:
        return request.remote is not None and ipaddress.ip_address(request.remote).is_loopback
    except ValueError:
        return False


async def shutdown(request: web.Request) -> web.Response:
    if not _is_local_peer(request):
        raise Forbidden("only a client on the daemon's own machine may stop it")
    grace = get(await read_json(request), "grace_seconds", float)
    if grace is not None and not 0 <= grace <= MAX_GRACE_S:
        raise InvalidRequest(f"'grace_seconds' must be from 0 to {MAX_GRACE_S:g} seconds")
    stop = request.app[SHUTDOWN]
    stop.request(float(grace) if grace is not None else None)
    return json_reply({"status": "stopping", "pid": request.app[DAEMON].pid,
                              "grace_seconds": stop.grace}, status=202)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/status", status)
    app.router.add_post("/api/shutdown", shutdown)
