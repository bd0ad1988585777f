"""When upstream members are checked: at most one check per member at a time, and the loop that
re-checks each one every CHECK_INTERVAL_S while healthy and every COOLING_CHECK_S while cooling down.

What a check does (``GET /v1/models`` or ``/api/tags``) is the router's
(:meth:`localrun.upstream.router.Upstreams.probe`); this module only schedules it. Everything runs
on the daemon's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .pool import Member, MemberState

log = logging.getLogger("localrun.upstream")

CHECK_INTERVAL_S = 15.0
COOLING_CHECK_S = 2.0
LOOP_TICK_S = 1.0


class HealthChecks:
    """Schedules ``probe(member)`` for the members ``members()`` returns (the current pools')."""

    def __init__(self, probe: Callable[[Member], Awaitable[None]], members: Callable[[], list[Member]],
                 clock: Callable[[], float]) -> None:
        self._probe, self._members, self._clock = probe, members, clock
        self._task: asyncio.Task[None] | None = None
        self._checks: dict[str, asyncio.Task[None]] = {}  # member URL -> its running check

    async def check(self, member: Member) -> None:
        """Check ``member`` now, or wait for the check of it already running."""
        running = self._checks.get(member.url)
        if running is not None and not running.done():
            await asyncio.shield(running)
            return
        task = asyncio.ensure_future(self._probe(member))
        self._checks[member.url] = task
        await asyncio.shield(task)

    async def refresh(self, stale_after: float = CHECK_INTERVAL_S) -> None:
        """Check (concurrently) every member not checked within ``stale_after`` seconds."""
        now = self._clock()
        due = [m for m in self._members() if m.checked_at is None or now - m.checked_at >= stale_after]
        if due:
            await asyncio.gather(*(self.check(m) for m in due), return_exceptions=True)

    def start(self) -> None:
        """Start the background loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def close(self) -> None:
        """Cancel the loop and every running check."""
        tasks = [t for t in [self._task, *self._checks.values()] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._checks.clear()

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.sleep(LOOP_TICK_S)
                now = self._clock()
                due = [m for m in self._members()
                       if m.checked_at is None
                       or now - m.checked_at >= (COOLING_CHECK_S if m.state(now) is MemberState.COOLING
                                                 else CHECK_INTERVAL_S)]
                for m in due:
                    if m.url not in self._checks or self._checks[m.url].done():
                        self._checks[m.url] = asyncio.ensure_future(self._probe(m))
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop must outlive any one bad check
                log.exception("upstream health check failed")
