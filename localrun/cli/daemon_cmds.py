"""``localrun ps`` and ``localrun stop NAME``: what the daemon has loaded, and unloading it."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from ..client import Client
from ..errors import NotFound


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
    """Ollama's columns, plus SLOTS: requests running / sequence slots (sized from memory at load)."""
    rows = [("NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "SLOTS", "UNTIL")]
    for m in models:
        digest = str(m.get("digest") or "").removeprefix("sha256:")[:12]
        size = int(m.get("size") or 0)
        processor = m.get("processor") or _processor(size, int(m.get("size_vram") or 0))
        slots = f"{m.get('active', 0)}/{m['num_parallel']}" if m.get("num_parallel") else "-"
        rows.append((str(m.get("name", "")), digest, human_size(size), processor,
                     str(m.get("context_length", "")), slots, until(m.get("expires_at"))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("    ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _processor(size: int, vram: int) -> str:
    if vram <= 0 or size <= 0:
        return "100% CPU"
    gpu = round(100 * vram / size)
    return "100% GPU" if gpu >= 100 else f"{100 - gpu}%/{gpu}% CPU/GPU"


def ps(args: argparse.Namespace) -> int:
    with Client() as client:
        print(ps_table(client.ps()))
    return 0


def stop(args: argparse.Namespace) -> int:
    with Client() as client:
        loaded = {m.get("name") for m in client.ps()} | {m.get("model") for m in client.ps()}
        wanted = args.model if ":" in args.model.rsplit("/", 1)[-1] else f"{args.model}:latest"
        if args.model not in loaded and wanted not in loaded:
            raise NotFound(f"model {args.model!r} is not loaded (see `localrun ps`)")
        client.stop(args.model if args.model in loaded else wanted)
    return 0
