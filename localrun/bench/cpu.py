"""CPU accounting around a level: the load generator's own use, the server's, and the machine's.

The load generator must not be the bottleneck. :class:`CpuMeter` snapshots this process's CPU
time (``resource.getrusage``), the whole machine's busy time and, when the target listens on this
machine, the server process and its children (psutil), so the report can say who used the cores
and warn when the client competes with the server.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

from ..jsontypes import JSONObject

log = logging.getLogger(__name__)

CLIENT_CORE_WARN = 0.25  # warn above a quarter of one core's time


@dataclass(frozen=True, slots=True)
class CpuUsage:
    """CPU used during an interval, in cores (1.0 = one core busy the whole interval)."""

    wall_s: float
    client_cores: float
    server_cores: float | None  # None when the server process is not on this machine / not found
    machine_cores: float  # every process on the machine, ours included
    cpu_count: int

    @property
    def other_cores(self) -> float | None:
        """Machine use by neither the client nor the server (other work competing for the cores)."""
        if self.server_cores is None:
            return None
        return max(0.0, self.machine_cores - self.client_cores - self.server_cores)

    def as_dict(self) -> JSONObject:
        return {
            "wall_s": round(self.wall_s, 3),
            "client_cores": round(self.client_cores, 3),
            "server_cores": None if self.server_cores is None else round(self.server_cores, 3),
            "machine_cores": round(self.machine_cores, 3),
            "other_cores": None if self.other_cores is None else round(self.other_cores, 3),
            "cpu_count": self.cpu_count,
        }


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _machine_busy() -> float:
    t = psutil.cpu_times()
    return float(sum(t)) - float(t.idle) - float(getattr(t, "iowait", 0.0))


def is_local(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    return host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.")


def find_server(base_url: str) -> psutil.Process | None:
    """The process listening on the target's port when it runs on this machine, else None."""
    if not is_local(base_url):
        return None
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                if conn.pid == os.getpid():
                    return None  # a stand-in server inside this process: cannot be told apart
                return psutil.Process(conn.pid)
    except (psutil.Error, OSError) as exc:
        log.debug("cannot look up the server process: %s", exc)
    return None


def _tree_cpu(proc: psutil.Process | None) -> float | None:
    if proc is None:
        return None
    total = 0.0
    try:
        for p in [proc, *proc.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                continue
    except psutil.Error:
        return None
    return total


class CpuMeter:
    """Measures CPU use between :meth:`start` and :meth:`stop` (one instance per interval)."""

    def __init__(self, server: psutil.Process | None = None) -> None:
        self.server = server
        self._t = self._client = self._machine = 0.0
        self._server: float | None = None

    def start(self) -> None:
        self._t, self._client, self._machine = time.perf_counter(), _self_cpu(), _machine_busy()
        self._server = _tree_cpu(self.server)

    def stop(self) -> CpuUsage:
        wall = max(time.perf_counter() - self._t, 1e-9)
        server_now = _tree_cpu(self.server)
        server = None
        if server_now is not None and self._server is not None:
            server = max(0.0, server_now - self._server) / wall
        return CpuUsage(
            wall_s=wall,
            client_cores=max(0.0, _self_cpu() - self._client) / wall,
            server_cores=server,
            machine_cores=max(0.0, _machine_busy() - self._machine) / wall,
            cpu_count=os.cpu_count() or 1,
        )


def warnings_for(usage: CpuUsage, label: str) -> list[str]:
    """Human-readable warnings when the measurement may be limited by the client or by others."""
    out: list[str] = []
    if usage.client_cores > CLIENT_CORE_WARN:
        out.append(
            f"{label}: the load generator used {usage.client_cores:.0%} of a core; "
            "it competes with the server for CPU, so the server's numbers may be low"
        )
    other = usage.other_cores
    if other is not None and other > 0.25:
        out.append(f"{label}: other processes used {other:.2f} cores during the run; numbers may be low")
    return out
