"""LOCALRUN_RPC_SERVERS reaches the runner's load: every layer offloaded unless num_gpu was asked for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from localrun.engine.types import LoadOptions
from localrun.hardware.placement import Placement
from localrun.runtime import protocol
from localrun.runtime.resident import LoadSpec
from localrun.server import app as app_module

CPU_ONLY = Placement(gpu_layers=0, ram=1000, vram=0, total_layers=25)


def _loaded_options(monkeypatch: pytest.MonkeyPatch, options: LoadOptions, rpc: tuple[str, ...]) -> LoadOptions:
    seen: list[LoadOptions] = []

    async def start(name: str, path: str, opts: LoadOptions, **_: Any) -> Any:
        seen.append(opts)
        return object()

    monkeypatch.setattr(app_module.RunnerProcess, "start", start)
    load = app_module.runner_load_fn(rpc_servers=rpc)
    asyncio.run(load(LoadSpec("m", "/m.gguf", options), CPU_ONLY))
    return seen[0]


def test_with_workers_every_layer_goes_to_them(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = _loaded_options(monkeypatch, LoadOptions(), ("10.0.0.2:50052", "10.0.0.3:50052"))
    assert opts.rpc_servers == ("10.0.0.2:50052", "10.0.0.3:50052") and opts.num_gpu == 25


def test_an_explicit_num_gpu_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _loaded_options(monkeypatch, LoadOptions(num_gpu=10), ("10.0.0.2:50052",)).num_gpu == 10


def test_without_workers_the_fit_check_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = _loaded_options(monkeypatch, LoadOptions(), ())
    assert opts.rpc_servers == () and opts.num_gpu == 0


def test_workers_survive_the_trip_to_the_runner() -> None:
    import json

    sent = LoadOptions(rpc_servers=("10.0.0.2:50052",))
    wire = json.loads(json.dumps(protocol.encode_load_options(sent)))
    assert protocol.decode_load_options(wire) == sent
