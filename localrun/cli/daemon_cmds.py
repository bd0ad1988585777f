"""``localrun ps`` and ``localrun stop NAME``: what the daemon has loaded, and unloading it.

``ps`` prints one line about the daemon (address, pid, version, uptime) above Ollama's table.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from ..client import DaemonStatus
from ..errors import LocalrunError, NotFound
from .connect import require_daemon


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("ps", help="list the models the daemon has loaded")
    p.set_defaults(func=ps)
    s = subparsers.add_parser("stop", help="unload a model from the daemon")
    s.add_argument("model", help="model name, e.g. gemma3:270m")
    s.set_defaults(func=stop)


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB", "MB") else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def until(expires_at: str | None, now: dt.datetime | None = None) -> str:
    """Ollama's UNTIL column: "4 minutes from now", "Forever", "Stopping..."."""
    if not expires_at:
        return "Forever"
    try:
        when = dt.datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    except ValueError:
        return expires_at
    now = now or dt.datetime.now(dt.timezone.utc)
    seconds = (when - now).total_seconds()
    if seconds > 100 * 365 * 86400:
        return "Forever"
    if seconds <= 0:
        return "Stopping..."
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''} from now"
    return "Less than a second"


def ps_table(models: list[dict[str, Any]]) -> str:
    rows = [("NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL")]
    for m in models:
        digest = str(m.get("digest") or "").removeprefix("sha256:")[:12]
        size = int(m.get("size") or 0)
        processor = m.get("processor") or _processor(size, int(m.get("size_vram") or 0))
        rows.append((str(m.get("name", "")), digest, human_size(size), processor,
                     str(m.get("context_length", "")), until(m.get("expires_at"))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("    ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _processor(size: int, vram: int) -> str:
    if vram <= 0 or size <= 0:
        return "100% CPU"
    gpu = round(100 * vram / size)
    return "100% GPU" if gpu >= 100 else f"{100 - gpu}%/{gpu}% CPU/GPU"


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


def daemon_line(status: DaemonStatus) -> str:
    return (f"localrun daemon at {status.address} (pid {status.pid}, version {status.version}, "
            f"up {human_duration(status.uptime_s)})")


def ps(args: argparse.Namespace) -> int:
    with require_daemon() as client:
        try:
            print(daemon_line(client.status()))
        except LocalrunError:  # a daemon older than /api/status
            print(f"localrun daemon at {client.base_url}")
        print(ps_table(client.ps()))
        members = client.upstreams()
        if members:
            print()
            print(upstream_table(members))
    return 0


def upstream_table(members: list[dict[str, Any]]) -> str:
    """One line per upstream member: its state, requests in flight, errors and time to first token."""
    rows = [("UPSTREAM", "MEMBER", "STATE", "IN FLIGHT", "REQUESTS", "ERRORS", "FIRST TOKEN", "MODELS")]
    for m in members:
        latency = m.get("latency_ms")
        state = str(m.get("state", ""))
        if state == "cooling" and m.get("cooling_s"):
            state = f"cooling ({m['cooling_s']:.0f} s)"
        rows.append((str(m.get("upstream", "")), str(m.get("url", "")), state, str(m.get("in_flight", 0)),
                     str(m.get("requests", 0)), str(m.get("errors", 0)),
                     f"{latency:.0f} ms" if isinstance(latency, (int, float)) else "-", str(m.get("models", 0))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["    ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for m in members:
        if m.get("state") == "cooling" and m.get("last_error"):
            lines.append(f"  {m.get('url')}: {m['last_error']}")
    return "\n".join(lines)


def stop(args: argparse.Namespace) -> int:
    with require_daemon() as client:
        models = client.ps()
        loaded = {m.get("name") for m in models} | {m.get("model") for m in models}
        wanted = args.model if ":" in args.model.rsplit("/", 1)[-1] else f"{args.model}:latest"
        if args.model not in loaded and wanted not in loaded:
            from ..store.names import near_names

            near = near_names(args.model, sorted(str(n) for n in loaded if n))
            hint = f"; did you mean {near[0]!r}?" if near else " (see `localrun ps`)"
            raise NotFound(f"model {args.model!r} is not loaded{hint}")
        client.stop(args.model if args.model in loaded else wanted)
    return 0
