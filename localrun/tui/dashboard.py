"""The live dashboard (``localrun top``, and F5 from the chat).

Every ``refresh_interval`` seconds a worker reads ``/api/ps``, ``/metrics`` and ``/health`` and
redraws: loaded models (RAM, VRAM, processor split, context, active and queued requests,
keep-alive countdown, KV cache use), totals (requests, queue depth, prefix-cache hit rate),
tokens/s over the last minutes as a sparkline, and downloads this app has running.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence

from rich.text import Text
from textual import getters, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, ProgressBar, Sparkline, Static

from .. import fmt
from ..errors import LocalrunError
from ..jsontypes import as_number
from . import stats as st
from .backend import Rows
from .shell import LocalrunShell

HISTORY = 120  # sparkline samples kept


class DashboardScreen(Screen[None]):
    """``standalone`` (``localrun top``): Esc/q quit the app; otherwise they return to the chat.

    Use :class:`TopScreen` for the standalone one, so the footer says Quit.
    """

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("q", "back", "Quit"),
        Binding("r", "refresh_now", "Refresh"),
    ]
    COLUMNS = ("NAME", "PROCESSOR", "RAM", "VRAM", "CONTEXT", "ACTIVE", "QUEUED", "KV CACHE", "UNTIL")

    app = getters.app(LocalrunShell)  # it only ever runs inside LocalrunApp

    def __init__(self, *, standalone: bool = False) -> None:
        super().__init__()
        self.standalone = standalone
        self.samples: deque[float] = deque([0.0] * HISTORY, maxlen=HISTORY)
        self.previous: st.MetricsSnapshot | None = None
        self.daemon_pulls: Rows = []  # downloads started elsewhere (CLI, other apps)

    def compose(self) -> ComposeResult:
        yield Static("localrun · dashboard", id="dash-title")
        yield DataTable(id="models", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="totals"):
            for key in ("throughput", "requests", "queue", "cache"):
                yield Static(id=f"total-{key}", classes="total")
        yield Label("tokens/s (generated, all models)", classes="section")
        yield Sparkline(list(self.samples), id="tps")
        yield Label("downloads", classes="section", id="pulls-title")
        yield Vertical(id="pulls")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#models", DataTable)
        table.add_columns(*self.COLUMNS)
        self.query_one("#pulls-title").display = False
        self.refresh_data()
        self.set_interval(self.app.refresh_interval, self.refresh_data)

    def action_back(self) -> None:
        if self.standalone:
            self.app.exit(0)
        else:
            self.app.pop_screen()

    def action_refresh_now(self) -> None:
        self.refresh_data()

    @work(exclusive=True, group="dashboard")
    async def refresh_data(self) -> None:
        backend = self.app.backend
        try:
            models = await backend.ps()
            health = await backend.health()
        except LocalrunError as exc:
            self.show_disconnected(str(exc).splitlines()[0])
            return
        try:
            snapshot: st.MetricsSnapshot | None = st.parse_metrics(await backend.metrics(), time.monotonic())
        except LocalrunError:
            snapshot = None
        try:
            self.daemon_pulls = list(await backend.pulls())
        except LocalrunError:
            self.daemon_pulls = []
        self.draw(models, health, snapshot)

    def show_disconnected(self, why: str) -> None:
        self.query_one("#dash-title", Static).update(Text(f"localrun · dashboard · daemon unreachable: {why}"))
        self.query_one("#dash-title").add_class("disconnected")
        self.samples.append(0.0)
        self.query_one("#tps", Sparkline).data = list(self.samples)

    def draw(self, models: Sequence[Mapping[str, object]], health: Mapping[str, object],
             snapshot: st.MetricsSnapshot | None) -> None:
        title = self.query_one("#dash-title", Static)
        title.remove_class("disconnected")
        uptime = health.get("uptime_seconds")
        up = f" · up {fmt.compact_duration(float(uptime))}" if isinstance(uptime, (int, float)) else ""
        title.update(Text(f"localrun {health.get('version', '')} · {self.app.backend.base_url}{up}"))
        self.draw_models(models, snapshot)
        tps = st.rate(self.previous, snapshot) if snapshot else 0.0
        if snapshot is not None:
            self.previous = snapshot
        self.samples.append(tps)
        self.query_one("#tps", Sparkline).data = list(self.samples)
        active = sum(int(m.get("active") or 0) for m in models)  # type: ignore[call-overload]
        queued = health.get("queue_depth", snapshot.queue_depth if snapshot else 0)
        hit = snapshot.cache_hit_rate if snapshot else None
        self._total("throughput", "tokens/s", f"{tps:.1f}", f"peak {max(self.samples):.1f}")
        self._total("requests", "model requests", f"{snapshot.requests:.0f}" if snapshot else "–", f"{active} active")
        self._total("queue", "queued", f"{queued}", f"{len(models)} loaded")
        cached = f"{snapshot.cached_tokens:.0f}/{snapshot.prompt_tokens:.0f} prompt tok hit" if snapshot else ""
        self._total("cache", "prefix cache", f"{hit:.0%}" if hit is not None else "–", cached)
        self.draw_pulls()

    def _total(self, key: str, label: str, value: str, detail: str) -> None:
        text = Text()
        text.append(f"{label}\n", style="dim")
        text.append(f"{value}\n", style="bold")
        text.append(detail, style="dim")
        self.query_one(f"#total-{key}", Static).update(text)

    def draw_models(self, models: Sequence[Mapping[str, object]], snapshot: st.MetricsSnapshot | None) -> None:
        table = self.query_one("#models", DataTable)
        table.clear()
        if not models:
            table.add_row(Text("no models loaded", style="dim"), *[""] * (len(self.COLUMNS) - 1))
            return
        for m in models:
            name = str(m.get("name") or m.get("model") or "")
            size = float(m.get("size") or 0)  # type: ignore[arg-type]
            vram = float(m.get("size_vram") or 0)  # type: ignore[arg-type]
            kv = ""
            if snapshot is not None and snapshot.kv_total.get(name):
                kv = f"{snapshot.kv_used.get(name, 0) / snapshot.kv_total[name]:.0%}"
            table.add_row(
                name, fmt.processor_column(m), fmt.human_bytes(max(size - vram, 0)), fmt.human_bytes(vram),
                str(m.get("context_length") or ""), str(m.get("active", "")), str(m.get("queued", "")), kv,
                fmt.countdown(m.get("expires_at")),  # type: ignore[arg-type]
                key=name,
            )

    def draw_pulls(self) -> None:
        from .shell import PullState

        pulls = {
            str(p.get("model")): PullState(str(p.get("model")), str(p.get("status") or "pulling"),
                                           as_number(p.get("completed")), as_number(p.get("total")))
            for p in self.daemon_pulls
        }
        pulls.update(self.app.pulls)
        box = self.query_one("#pulls", Vertical)
        self.query_one("#pulls-title").display = bool(pulls)
        for model, state in pulls.items():
            row_id = "pull-" + "".join(c if c.isalnum() else "-" for c in model)
            rows = box.query(f"#{row_id}")
            if not rows:
                box.mount(Horizontal(Label(Text(model), classes="pull-name"), ProgressBar(total=None),
                                     Label("", classes="pull-state"), id=row_id, classes="pull-row"))
                continue
            row = rows.first()
            bar = row.query_one(ProgressBar)
            if state.total:
                bar.update(total=state.total, progress=state.completed or 0)
            status = "done" if state.done else (state.error or state.status)
            row.query_one(".pull-state", Label).update(Text(status))


class TopScreen(DashboardScreen):
    """The dashboard as ``localrun top`` shows it: q or Esc quits."""

    BINDINGS = [Binding("escape", "back", "Quit", show=False), Binding("q", "back", "Quit")]

    def __init__(self) -> None:
        super().__init__(standalone=True)
