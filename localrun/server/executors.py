"""The daemon's thread pools: one per kind of blocking work, so one kind cannot starve another.

Before, every blocking call shared the event loop's default executor (6 threads on this machine):
seven slow pulls, or seven templates looping for ever, held all of them, and ``/api/tags``, model
resolution and generation queued behind. Now:

========== ======= ==================================================================================
pool       threads what runs there
========== ======= ==================================================================================
store      8       short store calls: resolve, list, show, copy, delete, blob writes (also the loop's
                   default executor, so ``asyncio.to_thread`` lands here)
transfers  4       pulls and creates: hub downloads and whole-model imports, which take minutes
probe      1       the device/memory probe (it may start a child process)
render     -       chat templates: :mod:`.templating` owns its own pool, sized to its worker processes
========== ======= ==================================================================================

A full pool makes new work of its kind wait (each pull has its own deadline, so transfers drain);
the other pools, and the event loop, are unaffected.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(slots=True)
class Executors:
    store: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=8, thread_name_prefix="store"))
    transfers: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=4, thread_name_prefix="transfer"))
    probe: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe"))

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make the store pool the loop's default executor (``asyncio.to_thread`` and friends)."""
        loop.set_default_executor(self.store)

    def shutdown(self) -> None:
        """Stop the transfer and probe pools; the store pool, the loop's default executor once
        installed, is shut down with the loop (code running during shutdown may still need it)."""
        for pool in (self.transfers, self.probe):
            pool.shutdown(wait=False, cancel_futures=True)


async def run_in(pool: ThreadPoolExecutor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` in ``pool``, awaited (copies the caller's context variables)."""
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(pool, call)
