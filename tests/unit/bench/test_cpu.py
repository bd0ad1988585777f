"""CPU accounting: the load generator warns when it competes with the server for cores."""

from __future__ import annotations

import pytest

from localrun.bench.cpu import CpuMeter, CpuUsage, find_server, is_local, warnings_for


def test_a_busy_client_is_warned_about() -> None:
    usage = CpuUsage(wall_s=10, client_cores=0.4, server_cores=1.5, machine_cores=1.95, cpu_count=2)
    assert any("load generator used 40% of a core" in w for w in warnings_for(usage, "x @ 8"))


def test_a_quiet_client_on_a_quiet_machine_gets_no_warning() -> None:
    usage = CpuUsage(wall_s=10, client_cores=0.03, server_cores=1.9, machine_cores=1.95, cpu_count=2)
    assert warnings_for(usage, "x @ 8") == []


def test_other_load_on_the_machine_is_reported() -> None:
    usage = CpuUsage(wall_s=10, client_cores=0.05, server_cores=1.0, machine_cores=1.9, cpu_count=2)
    assert usage.other_cores == pytest.approx(0.85)
    assert any("other processes used 0.85 cores" in w for w in warnings_for(usage, "x @ 1"))


def test_meter_measures_this_process() -> None:
    meter = CpuMeter()
    meter.start()
    sum(i * i for i in range(300_000))  # some CPU work in this process
    usage = meter.stop()
    assert usage.client_cores > 0 and usage.server_cores is None and usage.cpu_count >= 1


@pytest.mark.parametrize(("url", "local"), [("http://127.0.0.1:8000", True), ("http://localhost", True),
                                             ("https://api.example.com", False)])
def test_only_local_servers_are_looked_up(url: str, local: bool) -> None:
    assert is_local(url) is local
    if not local:
        assert find_server(url) is None
