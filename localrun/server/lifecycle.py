"""The daemon's own life: who it is (:class:`DaemonInfo`), how a stop is asked for (:class:`Shutdown`), and
how it ends (:func:`drain`).

A stop comes from SIGINT/SIGTERM or ``POST /api/shutdown`` (``localrun daemon stop``). Ending is
graceful, in this order: new requests are refused (503, "the daemon is shutting down") and the
listening socket closes; requests in flight get ``grace`` seconds to finish; then every model is
unloaded, so its runner process exits and a request still streaming ends with an error chunk
rather than a cut connection; last, aiohttp closes the connections.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from ..runtime.scheduler import Scheduler

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 10.0  # how long requests in flight may run on after a stop is asked for
MAX_GRACE_S = 3600.0


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    """Facts about this daemon process, served by ``GET /api/status``.

    ``log_file`` is where this daemon's output goes (None: a terminal, a pipe or a service
    manager's journal); its own lines start at byte ``log_offset`` (a service appends every start
    to one file).
    """

    pid: int
    started_at: float  # time.time() when it started
    log_file: Path | None = None
    log_offset: int = 0


class Shutdown:
    """A stop request, with the grace requests in flight get.

    The first request sets the grace (``None``: :data:`DEFAULT_GRACE_S`); a second one (Ctrl-C
    pressed again) ends the grace at once.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.grace = DEFAULT_GRACE_S

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, grace: float | None = None) -> None:
        if self._event.is_set():
            self.grace = 0.0
            return
        if grace is not None:
            self.grace = min(max(grace, 0.0), MAX_GRACE_S)
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


async def drain(runner: web.AppRunner, scheduler: Scheduler, shutdown: Shutdown) -> None:
    """End the daemon gracefully (see the module docstring). ``runner`` is cleaned up on return."""
    loop = asyncio.get_running_loop()
    scheduler.refuse_new()
    for site in list(runner.sites):
        await site.stop()
    if scheduler.in_flight:
        log.info("shutting down: %d request(s) in flight get up to %gs to finish", scheduler.in_flight,
                 shutdown.grace)
    started = loop.time()
    while scheduler.in_flight and loop.time() < started + shutdown.grace:  # a second Ctrl-C zeroes the grace
        await asyncio.sleep(0.05)
    if scheduler.in_flight:
        log.info("shutting down: ending %d request(s) still running", scheduler.in_flight)
    log.info("shutting down: unloading models")
    await scheduler.close()
    await runner.cleanup()
    log.info("stopped")
