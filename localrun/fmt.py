"""How localrun shows numbers to people: byte sizes, durations, keep-alive expiry, the PROCESSOR column.

The one home of every formatter the CLI, the TUI, ``localrun info`` and error messages use. Pure
(standard library only), so any package may import it.

- Byte sizes: :func:`human_bytes` in decimal units as Ollama prints them (``253 MB``, ``1.5 GB``);
  :func:`binary_bytes` in binary units for ``localrun info`` (``22.9 GiB``).
- Durations: :func:`format_seconds` for measured times (``120ms``, ``1.53s``); :func:`compact_duration`
  for the TUI (``4m 12s``); :func:`human_duration` for uptimes (``2 hours 5 minutes``);
  :func:`human_ago` for the ``MODIFIED`` column (``3 days ago``).
- Keep-alive expiry: the daemon sends ``expires_at`` as an ISO time, :data:`FOREVER_ISO` (Ollama's way)
  for a model that never expires. :func:`seconds_left` reads it (``None`` = forever, the one rule);
  :func:`countdown` renders it for the TUI, :func:`until` in Ollama's ``UNTIL`` words.
- :func:`processor_split` is Ollama's ``PROCESSOR`` column from a placement; :func:`processor_column`
  reads it from an ``/api/ps`` row (the daemon's own value, else computed from ``size``/``size_vram``).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping

FOREVER_ISO = "2318-11-22T00:00:00Z"  # how Ollama's API writes "never expires"
FOREVER_AFTER_S = 10 * 365 * 86400  # an expiry further away than this reads as forever


# --- byte sizes -------------------------------------------------------------------------------

def human_bytes(n: float) -> str:
    """Decimal units like Ollama: ``512 B``, ``253 MB``, ``1.5 GB``, ``2.0 TB``."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB", "MB") else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable: the loop returns at TB")


def binary_bytes(n: float | None) -> str:
    """Binary units for ``localrun info``: ``512 B``, ``1.5 MiB``, ``22.9 GiB``; ``?`` when unknown."""
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable: the loop returns at GiB")


# --- durations --------------------------------------------------------------------------------

def format_seconds(seconds: float) -> str:
    """``850µs``, ``120ms``, ``1.53s``, ``2m05s``: compact, like Go's durations."""
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f}µs"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def compact_duration(seconds: float) -> str:
    """``1h 05m``, ``4m 12s``, ``9s`` (whole seconds)."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def human_duration(seconds: float) -> str:
    """``3 seconds``, ``12 minutes``, ``2 hours 5 minutes``, ``3 days 4 hours``."""
    parts: list[str] = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count = int(seconds // size)
        if count or (unit == "second" and not parts):
            parts.append(f"{count} {unit}{'s' if count != 1 else ''}")
            seconds -= count * size
        if len(parts) == 2:
            break
    return " ".join(parts)


def human_ago(ts: float, now: float | None = None) -> str:
    """Ollama's ``MODIFIED`` column for a Unix time: ``About a minute ago``, ``3 days ago``."""
    delta = max(0.0, (now if now is not None else time.time()) - ts)
    for unit, seconds in (("year", 31_536_000), ("month", 2_592_000), ("week", 604_800), ("day", 86_400),
                          ("hour", 3600), ("minute", 60)):
        if delta >= seconds:
            count = int(delta // seconds)
            if count == 1:
                return f"{'An' if unit == 'hour' else 'A'} {unit} ago" if unit != "minute" else "About a minute ago"
            return f"{count} {unit}s ago"
    if delta < 1:
        return "Less than a second ago"
    return "1 second ago" if int(delta) == 1 else f"{int(delta)} seconds ago"


# --- keep-alive expiry ------------------------------------------------------------------------

def seconds_left(expires_at: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds until ``expires_at`` (an ISO time; naive means UTC), ``None`` when it never expires
    (missing, or more than :data:`FOREVER_AFTER_S` away). Raises ValueError when it is no ISO time."""
    if not expires_at:
        return None
    when = dt.datetime.fromisoformat(str(expires_at).replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    seconds = (when - (now or dt.datetime.now(dt.UTC))).total_seconds()
    return None if seconds > FOREVER_AFTER_S else seconds


def countdown(expires_at: str | None, now: dt.datetime | None = None) -> str:
    """Keep-alive left, for the TUI: ``4m 12s``, ``forever``, ``unloading`` (the text as is when unreadable)."""
    try:
        seconds = seconds_left(expires_at, now)
    except ValueError:
        return str(expires_at)
    if seconds is None:
        return "forever"
    if int(seconds) <= 0:
        return "unloading"
    return compact_duration(seconds)


def until(expires_at: str | None, now: dt.datetime | None = None) -> str:
    """Ollama's ``UNTIL`` column: ``4 minutes from now``, ``Forever``, ``Stopping...``."""
    try:
        seconds = seconds_left(expires_at, now)
    except ValueError:
        return str(expires_at)
    if seconds is None:
        return "Forever"
    if seconds <= 0:
        return "Stopping..."
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''} from now"
    return "Less than a second"


# --- the PROCESSOR column ---------------------------------------------------------------------

def processor_split(cpu_bytes: int, gpu_bytes: int, gpu_layers: int, total_layers: int) -> str:
    """``100% CPU`` when nothing is offloaded, ``100% GPU`` when every layer is, else the byte split.

    A partial offload never reads ``100%/0%``: the shares are kept between 1% and 99%.
    """
    if gpu_layers <= 0 or gpu_bytes <= 0:
        return "100% CPU"
    if gpu_layers >= total_layers:
        return "100% GPU"
    gpu_pct = min(99, max(1, round(100 * gpu_bytes / max(1, cpu_bytes + gpu_bytes))))
    return f"{100 - gpu_pct}%/{gpu_pct}% CPU/GPU"


def processor_column(row: Mapping[str, object]) -> str:
    """The ``PROCESSOR`` of an ``/api/ps`` row: the daemon's own ``processor``, else computed from
    ``size`` and ``size_vram`` (an Ollama daemon sends only those)."""
    given = row.get("processor")
    if isinstance(given, str) and given:
        return given
    size, vram = _number(row.get("size")), _number(row.get("size_vram"))
    if vram <= 0 or size <= 0:
        return "100% CPU"
    gpu = round(100 * vram / size)
    return "100% GPU" if gpu >= 100 else f"{100 - gpu}%/{gpu}% CPU/GPU"


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0
