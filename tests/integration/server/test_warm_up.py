"""A daemon starts what a model's first request would wait for as soon as it starts (Service.warm):
the device probe and the repacking answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from localrun.hardware import memory
from localrun.server.service import Service
from localrun.store import ModelStore


def test_warm_up_probes_once_and_answers_repacking(tmp_path: Path, monkeypatch: Any) -> None:
    probes: list[int] = []

    async def probe() -> tuple[int, list[memory.Device]]:
        probes.append(1)
        return 1 << 30, []

    monkeypatch.setattr("localrun.hardware.repack.allowed", lambda: True)
    none: Any = None
    service = Service(ModelStore(tmp_path), none, none, num_parallel=1, geometry=memory.read_geometry, probe=probe)

    async def main() -> None:
        service.warm()
        assert service._warming is not None
        await service._warming
        assert await service.repack_allowed() is True

    asyncio.run(main())
    assert probes == [1]


def test_a_daemon_stopping_during_warm_up_cancels_it(tmp_path: Path, monkeypatch: Any) -> None:
    started = asyncio.Event()
    monkeypatch.setattr("localrun.hardware.repack.allowed", lambda: True)

    async def slow_probe() -> tuple[int, list[memory.Device]]:
        started.set()
        await asyncio.sleep(60)
        return 0, []

    none: Any = None
    service = Service(ModelStore(tmp_path), none, none, num_parallel=1, geometry=memory.read_geometry,
                      probe=slow_probe)

    async def main() -> None:
        service.warm()
        await started.wait()
        service.stop_warming()
        assert service._warming is not None
        await asyncio.wait_for(asyncio.gather(service._warming, return_exceptions=True), 5)
        assert service._warming.cancelled()

    asyncio.run(main())
