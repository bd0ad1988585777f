"""``localrun ps`` and ``localrun stop NAME``: what the daemon has loaded, and unloading it.

``ps`` prints one line about the daemon (address, pid, version, uptime) above Ollama's table.
"""

from __future__ import annotations

import argparse

from ..client import DaemonStatus
from ..errors import LocalrunError, NotFound
from ..fmt import human_bytes, human_duration, processor_column, until
from ..jsontypes import JSONObject, JSONValue, as_number
from .connect import require_daemon


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("ps", help="list the models the daemon has loaded")
    p.set_defaults(func=ps)
    s = subparsers.add_parser("stop", help="unload a model from the daemon")
    s.add_argument("model", help="model name, e.g. gemma3:270m")
    s.set_defaults(func=stop)


def _text_or_none(value: JSONValue) -> str | None:
    return None if value is None else str(value)


def ps_table(models: list[JSONObject]) -> str:
    """Ollama's columns (CONTEXT: the most tokens one request may hold), plus POOL: the KV cache's
    tokens, which the running requests share, and SLOTS: requests running / sequence slots (both
    sized from memory at load)."""
    rows = [("NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "POOL", "SLOTS", "THREADS", "UNTIL")]
    notes: list[str] = []
    for m in models:
        digest = str(m.get("digest") or "").removeprefix("sha256:")[:12]
        size = int(as_number(m.get("size")) or 0)
        slots = f"{m.get('active', 0)}/{m['num_parallel']}" if m.get("num_parallel") else "-"
        threads, note = threads_column(m.get("threads"))
        if note:
            notes.append(f"  {m.get('name', '')}: {note}")
        rows.append((str(m.get("name", "")), digest, human_bytes(size), processor_column(m),
                     str(m.get("context_length", "")), str(m.get("context_pool") or "-"), slots, threads,
                     until(_text_or_none(m.get("expires_at")))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["    ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    return "\n".join(lines + notes)


def threads_column(value: JSONValue) -> tuple[str, str]:
    """THREADS (decode threads of the cores the runner may use) and, when that is not every core or
    was pinned, a line saying why (engine/threads.py)."""
    if not isinstance(value, dict):
        return "-", ""
    decode, prefill, cores = (int(as_number(value.get(k)) or 0) for k in ("decode", "prefill", "cores"))
    column = f"{decode}/{cores}"
    if value.get("pinned"):
        return column, f"{decode} threads, pinned by num_thread"
    if decode == prefill == cores:
        return column, ""
    load = as_number(value.get("other_load")) or 0.0
    return column, (f"{decode} threads decode and {prefill} prefill: other processes use {load:.1f} "
                    f"of {cores} cores")


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


def upstream_table(members: list[JSONObject]) -> str:
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
    lines = ["    ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
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
