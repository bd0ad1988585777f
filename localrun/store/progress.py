"""Progress reports of long store operations (pull, create, import), for bars and API streams.

The fields match Ollama's pull/create stream (``status``, ``digest``, ``total``, ``completed``),
so the daemon can forward them as they are; ``rate`` is bytes per second when known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Progress:
    status: str                     # e.g. "pulling manifest", "downloading", "verifying sha256 digest", "success"
    digest: str | None = None       # the blob being transferred
    total: int | None = None        # bytes expected
    completed: int | None = None    # bytes done so far
    rate: float | None = None       # bytes per second over the transfer so far


ProgressFn = Callable[[Progress], None]


def report(progress: ProgressFn | None, status: str, **kw: object) -> None:
    """Send one report when a callback was given."""
    if progress is not None:
        progress(Progress(status, **kw))  # type: ignore[arg-type]
