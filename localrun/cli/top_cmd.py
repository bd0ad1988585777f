"""``localrun top``: a live dashboard of the daemon (loaded models, memory, queue, tokens/s).

In a terminal it opens the dashboard screen of the TUI, refreshed every ``--interval`` seconds
(q or Esc quits). With ``--once``, or when stdout is not a terminal, it prints one snapshot as
text and exits, so scripts and tests can read it. It never starts a daemon: watching nothing is
an error (exit 1).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from ..errors import DaemonUnavailable, LocalrunError
from ..jsontypes import JSONObject, JSONValue, as_number


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "top", help="live dashboard of the daemon: loaded models, memory, queue, tokens/s",
        description="Live dashboard of the running daemon. q or Esc quits.",
        epilog="Exit codes: 0 success, 1 no daemon answers or an error, 2 bad usage.",
    )
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="refresh period (default 1)")
    p.add_argument("--once", action="store_true", help="print one snapshot as text and exit")
    p.set_defaults(func=top)


async def _snapshot() -> tuple[list[JSONObject], JSONObject, str | None]:
    from ..tui.backend import ClientBackend

    backend = ClientBackend()
    try:
        models = await backend.ps()
        health = await backend.health()
        try:
            metrics: str | None = await backend.metrics()
        except LocalrunError:
            metrics = None
        return models, health, metrics
    finally:
        await backend.aclose()


def _text_or_none(value: JSONValue) -> str | None:
    return None if value is None else str(value)


def snapshot_text(models: list[JSONObject], health: JSONObject, metrics: str | None) -> str:
    from .. import fmt
    from ..tui import stats as st

    snap = st.parse_metrics(metrics, time.monotonic()) if metrics else None
    rows = [("NAME", "PROCESSOR", "RAM", "VRAM", "CONTEXT", "ACTIVE", "QUEUED", "UNTIL")]
    for m in models:
        size, vram = as_number(m.get("size")) or 0.0, as_number(m.get("size_vram")) or 0.0
        rows.append((str(m.get("name", "")), fmt.processor_column(m), fmt.human_bytes(max(size - vram, 0)),
                     fmt.human_bytes(vram), str(m.get("context_length", "")), str(m.get("active", "")),
                     str(m.get("queued", "")), fmt.countdown(_text_or_none(m.get("expires_at")))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["    ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    lines.append("")
    lines.append(f"queue depth: {health.get('queue_depth', 0)}")
    if snap is not None:
        hit = snap.cache_hit_rate
        lines.append(f"requests: {snap.requests:.0f}")
        lines.append(f"generated tokens: {snap.generated_tokens:.0f}")
        lines.append("prefix cache hit rate: " + (f"{hit:.0%}" if hit is not None else "n/a"))
    return "\n".join(lines)


def top(args: argparse.Namespace) -> int:
    if not args.interval > 0:
        print("Error: --interval must be more than 0", file=sys.stderr)
        return 2
    try:
        models, health, metrics = asyncio.run(_snapshot())
    except DaemonUnavailable as exc:
        raise DaemonUnavailable(f"{exc.message.splitlines()[0]}; start it with `localrun serve`") from exc
    if args.once or not sys.stdout.isatty():
        print(snapshot_text(models, health, metrics))
        return 0
    from ..tui.app import LocalrunApp
    from ..tui.backend import ClientBackend

    app = LocalrunApp(ClientBackend(), mode="top", refresh_interval=args.interval)
    return int(app.run() or 0)
