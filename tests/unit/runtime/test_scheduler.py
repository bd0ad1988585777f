"""Scheduler behaviour with a fake backend, fake memory probe and fake clock (no processes, no model)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from localrun import errors
from localrun.engine.types import LoadOptions, ModelInfo
from localrun.hardware.devices import Device, DeviceKind
from localrun.hardware.memory import GiB, MiB, ModelGeometry
from localrun.hardware.placement import Placement
from localrun.runtime.scheduler import LoadSpec, Scheduler


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sleepers.append((self.now + seconds, fut))
        await fut

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for deadline, fut in list(self.sleepers):
            if deadline <= self.now and not fut.done():
                fut.set_result(None)
        await settle()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


class FakeBackend:
    def __init__(self, spec: LoadSpec) -> None:
        self.name = spec.name
        self.spec = spec
        self.pid = 4242
        self.info: ModelInfo | None = None
        self.exited: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.closed = False

    @property
    def alive(self) -> bool:
        return not self.exited.done()

    async def close(self) -> None:
        self.closed = True
        if not self.exited.done():
            self.exited.set_result("unloaded")

    def crash(self) -> None:
        self.exited.set_result("killed by signal SIGKILL")


class World:
    """The fake machine: model sizes by path, free RAM, GPUs, and a record of loads."""

    def __init__(self, free_ram: int = 64 * GiB, gpus: list[Device] | None = None) -> None:
        self.free_ram = free_ram
        self.gpus = gpus or []
        self.sizes: dict[str, int] = {}
        self.loads: list[LoadSpec] = []
        self.backends: list[FakeBackend] = []
        self.clock = FakeClock()

    def geometry(self, path: str) -> ModelGeometry:
        return ModelGeometry(architecture="llama", file_size=self.sizes.get(path, 100 * MiB), n_layer=2, n_embd=64,
                             n_ff=128, n_head=4, n_head_kv=2, head_dim_k=16, head_dim_v=16, n_vocab=300,
                             n_ctx_train=2048)

    def probe(self) -> tuple[int, list[Device]]:
        # Resident models use the RAM they were placed in, as on a real machine.
        used = sum(b.placement.ram for b in self.backends if b.alive)  # type: ignore[attr-defined]
        return self.free_ram - used, self.gpus

    async def load(self, spec: LoadSpec, placement: Placement) -> FakeBackend:
        backend = FakeBackend(spec)
        backend.placement = placement  # type: ignore[attr-defined]
        self.loads.append(spec)
        self.backends.append(backend)
        return backend

    def scheduler(self, **kw: Any) -> Scheduler:
        kw.setdefault("default_keep_alive", 300.0)
        return Scheduler(self.load, probe=self.probe, geometry=self.geometry,
                         clock=self.clock, **kw)


def spec(name: str, **options: Any) -> LoadSpec:
    options.setdefault("num_ctx", 512)
    options.setdefault("num_parallel", 1)
    return LoadSpec(name=name, model_path=f"/models/{name}.gguf", options=LoadOptions(**options))


@pytest.fixture
def world() -> World:
    return World()


async def test_loads_on_first_use_and_reuses_the_resident_copy(world: World) -> None:
    s = world.scheduler()
    a = await s.acquire(spec("a"))
    a.release()
    b = await s.acquire(spec("a"))
    b.release()
    assert [x.name for x in world.loads] == ["a"]
    assert a.load_duration_ns >= 0 and b.load_duration_ns == 0
    await s.close()


async def test_keep_alive_unloads_an_idle_model_only_after_it_expires(world: World) -> None:
    s = world.scheduler()
    lease = await s.acquire(spec("a"), 60.0)
    await world.clock.advance(600)  # busy models never expire
    assert "a" in s.models
    lease.release()
    await world.clock.advance(59)
    assert "a" in s.models
    assert s.expires_at(s.models["a"]) == pytest.approx(world.clock.time() + 1)
    await world.clock.advance(2)
    assert "a" not in s.models and world.backends[0].closed
    await s.close()


async def test_keep_alive_zero_unloads_after_the_request_and_negative_never(world: World) -> None:
    s = world.scheduler()
    (await s.acquire(spec("a"), 0)).release()
    await settle()
    assert "a" not in s.models
    (await s.acquire(spec("b"), None)).release()
    await world.clock.advance(10 ** 7)
    assert "b" in s.models and s.expires_at(s.models["b"]) is None
    await s.close()


async def test_stopping_the_daemon_mid_unload_waits_for_the_runner_to_exit(world: World) -> None:
    """keep_alive 0 unloads from the scheduler's own loop; a shutdown that cancels the loop while the
    runner is still exiting must wait for it, not leave it behind."""
    s = world.scheduler()
    lease = await s.acquire(spec("a"), 0)
    backend = world.backends[0]
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def slow_close() -> None:
        backend.closed = True
        await gate
        backend.exited.set_result("unloaded")

    backend.close = slow_close  # type: ignore[method-assign]
    lease.release()
    await settle()
    assert "a" not in s.models and backend.closed and backend.alive  # told to exit, still exiting
    stopping = asyncio.create_task(s.close())
    await settle()
    assert not stopping.done()
    gate.set_result(None)
    await stopping
    assert not backend.alive


async def test_a_new_request_resets_the_keep_alive_timer(world: World) -> None:
    s = world.scheduler()
    (await s.acquire(spec("a"), 60.0)).release()
    await world.clock.advance(50)
    (await s.acquire(spec("a"), 60.0)).release()
    await world.clock.advance(50)
    assert "a" in s.models
    await s.close()


async def test_max_loaded_evicts_the_least_recently_used_idle_model(world: World) -> None:
    s = world.scheduler(max_loaded=2)
    (await s.acquire(spec("a"))).release()
    await world.clock.advance(1)
    (await s.acquire(spec("b"))).release()
    await world.clock.advance(1)
    (await s.acquire(spec("a"))).release()  # a is now more recent than b
    await world.clock.advance(1)
    (await s.acquire(spec("c"))).release()
    assert sorted(s.models) == ["a", "c"]
    await s.close()


async def test_a_busy_model_is_never_evicted_the_request_waits(world: World) -> None:
    s = world.scheduler(max_loaded=1)
    held = await s.acquire(spec("a"))
    waiter = asyncio.create_task(s.acquire(spec("b")))
    await settle()
    assert not waiter.done() and list(s.models) == ["a"]
    assert s.queue_depth == 1
    held.release()
    lease = await asyncio.wait_for(waiter, 5)
    assert list(s.models) == ["b"] and world.backends[0].closed
    lease.release()
    await s.close()


async def test_memory_fit_evicts_idle_models_to_make_room(world: World) -> None:
    world.free_ram = 1 * GiB
    world.sizes = {"/models/a.gguf": 600 * MiB, "/models/b.gguf": 600 * MiB}
    s = world.scheduler(max_loaded=5)
    (await s.acquire(spec("a"))).release()
    (await s.acquire(spec("b"))).release()
    assert list(s.models) == ["b"]
    await s.close()


async def test_a_model_that_can_never_fit_says_how_much_it_needs(world: World) -> None:
    world.free_ram = 1 * GiB
    world.sizes = {"/models/huge.gguf": 3 * GiB}
    s = world.scheduler()
    with pytest.raises(errors.ModelTooLarge, match=r"needs about 3\.\d GB"):
        await s.acquire(spec("huge"))
    assert not s.models and not world.loads
    await s.close()


async def test_different_load_options_reload_and_say_why(world: World, caplog: pytest.LogCaptureFixture) -> None:
    s = world.scheduler()
    (await s.acquire(spec("a", num_ctx=512))).release()
    caplog.set_level("INFO", logger="localrun.runtime.scheduler")
    (await s.acquire(spec("a", num_ctx=1024))).release()
    assert [x.options.num_ctx for x in world.loads] == [512, 1024]
    assert world.backends[0].closed
    assert "num_ctx 512 -> 1024" in s.models["a"].reason
    assert "reloading a: num_ctx 512 -> 1024" in caplog.text
    await s.close()


async def test_reload_waits_for_requests_on_the_old_copy(world: World) -> None:
    s = world.scheduler()
    held = await s.acquire(spec("a", num_ctx=512))
    waiter = asyncio.create_task(s.acquire(spec("a", num_ctx=1024)))
    await settle()
    assert not waiter.done() and not world.backends[0].closed
    held.release()
    (await asyncio.wait_for(waiter, 5)).release()
    assert s.models["a"].spec.options.num_ctx == 1024
    await s.close()


async def test_past_the_queue_bound_requests_get_busy(world: World) -> None:
    s = world.scheduler(max_queue=1)
    first = await s.acquire(spec("a", num_parallel=1))
    second = await s.acquire(spec("a", num_parallel=1))  # waits for the engine slot: queued
    assert s.models["a"].queued == 1 and s.queue_depth == 1
    with pytest.raises(errors.Busy) as info:
        await s.acquire(spec("a", num_parallel=1))
    assert info.value.status == 503 and info.value.retry_after > 0
    second.release()
    third = await s.acquire(spec("a", num_parallel=1))  # room again
    for lease in (first, third):
        lease.release()
    await s.close()


async def test_a_crashed_runner_is_forgotten_and_the_next_request_reloads(world: World) -> None:
    s = world.scheduler()
    lease = await s.acquire(spec("a"))
    world.backends[0].crash()
    await settle()
    assert "a" not in s.models
    lease.release()  # the failed request's lease: harmless
    (await s.acquire(spec("a"))).release()
    assert len(world.loads) == 2 and s.models["a"].backend is world.backends[1]
    await s.close()


async def test_a_waiter_that_gives_up_does_not_load_anything(world: World) -> None:
    s = world.scheduler(max_loaded=1)
    held = await s.acquire(spec("a"))
    waiter = asyncio.create_task(s.acquire(spec("b")))
    await settle()
    waiter.cancel()
    await settle()
    held.release()
    await settle()
    assert [x.name for x in world.loads] == ["a"] and s.queue_depth == 0
    await s.close()


async def test_stop_unloads_now_when_idle_and_after_in_flight_requests_otherwise(world: World) -> None:
    s = world.scheduler()
    (await s.acquire(spec("a"))).release()
    assert await s.unload("a") and "a" not in s.models
    held = await s.acquire(spec("b"))
    assert await s.unload("b")
    assert "b" in s.models  # still serving
    held.release()
    await settle()
    assert "b" not in s.models
    assert not await s.unload("nothing")
    await s.close()


async def test_layers_go_to_the_gpu_when_it_has_room_and_num_gpu_overrides(world: World) -> None:
    world.gpus = [Device("GPU0", "", DeviceKind.GPU, 8 * GiB, 8 * GiB, "CUDA")]
    s = world.scheduler()
    (await s.acquire(spec("a"))).release()
    assert s.models["a"].placement.processor() == "100% GPU"
    (await s.acquire(spec("b", num_gpu=0))).release()
    assert s.models["b"].placement.processor() == "100% CPU"
    # room for one layer past the 512 MiB reserve
    world.gpus = [Device("GPU0", "", DeviceKind.GPU, 8 * GiB, 712 * MiB, "CUDA")]
    world.sizes["/models/c.gguf"] = 300 * MiB
    (await s.acquire(spec("c"))).release()
    processor = s.models["c"].placement.processor()
    assert processor.endswith("CPU/GPU"), processor
    await s.close()


async def test_load_errors_reach_the_request_and_leave_nothing_resident(world: World) -> None:
    async def failing(spec: LoadSpec, placement: Placement) -> FakeBackend:
        raise errors.InvalidModelFile("not a GGUF")

    s = Scheduler(failing, probe=world.probe, geometry=world.geometry,
                  clock=world.clock)
    with pytest.raises(errors.InvalidModelFile):
        await s.acquire(spec("a"))
    assert not s.models
    await s.close()


async def test_a_waiting_load_is_not_starved_by_new_requests_for_the_busy_model(world: World) -> None:
    s = world.scheduler(max_loaded=1)
    first = await s.acquire(spec("a", num_parallel=4))
    waiter_b = asyncio.create_task(s.acquire(spec("b")))
    await settle()
    late_a = asyncio.create_task(s.acquire(spec("a", num_parallel=4)))  # arrives after b: queues behind it
    await settle()
    assert not late_a.done() and s.models["a"].refcount == 1
    first.release()
    lease_b = await asyncio.wait_for(waiter_b, 5)
    assert list(s.models) == ["b"]
    lease_b.release()
    (await asyncio.wait_for(late_a, 5)).release()
    assert [x.name for x in world.loads] == ["a", "b", "a"]
    await s.close()


async def test_requests_for_other_resident_models_pass_a_waiting_load(world: World) -> None:
    world.free_ram = 1 * GiB
    world.sizes = {"/models/a.gguf": 400 * MiB, "/models/c.gguf": 100 * MiB, "/models/b.gguf": 700 * MiB}
    s = world.scheduler(max_loaded=5)
    held_a = await s.acquire(spec("a"))
    (await s.acquire(spec("c"))).release()
    waiter_b = asyncio.create_task(s.acquire(spec("b")))  # needs a's memory: waits for a
    await settle()
    assert not waiter_b.done()
    lease_c = await asyncio.wait_for(s.acquire(spec("c")), 5)  # c is resident and not in the way
    lease_c.release()
    held_a.release()
    (await asyncio.wait_for(waiter_b, 5)).release()
    await s.close()


async def test_a_load_that_never_finishes_times_out_and_the_scheduler_goes_on(world: World) -> None:
    hang = asyncio.Event()

    async def stuck(spec: LoadSpec, placement: Placement) -> FakeBackend:
        if spec.name == "stuck":
            await hang.wait()
        return await world.load(spec, placement)

    s = Scheduler(stuck, probe=world.probe, geometry=world.geometry, clock=world.clock, load_timeout=0.2)
    with pytest.raises(errors.EngineError, match="longer than"):
        await s.acquire(spec("stuck"))
    (await s.acquire(spec("fine"))).release()
    assert list(s.models) == ["fine"]
    await s.close()


async def test_a_switch_for_the_model_count_loads_the_next_model_while_the_last_one_closes(world: World) -> None:
    """LOCALRUN_MAX_LOADED_MODELS=1 with memory to spare: the old runner's exit (saving its prefix
    cache) does not delay the new model; evicted for memory, it would."""
    release_close = asyncio.Event()
    world_close = FakeBackend.close

    async def slow_close(self: FakeBackend) -> None:
        await release_close.wait()
        await world_close(self)

    FakeBackend.close = slow_close  # type: ignore[method-assign]
    try:
        s = world.scheduler(max_loaded=1)
        (await s.acquire(spec("a"))).release()
        b = await asyncio.wait_for(s.acquire(spec("b")), 5)  # granted while a is still closing
        assert list(s.models) == ["b"] and not world.backends[0].closed
        b.release()
        release_close.set()
        await s.close()
        assert world.backends[0].closed
    finally:
        FakeBackend.close = world_close  # type: ignore[method-assign]


@pytest.mark.allow_5xx(reason="the test injects an exception into the scheduler's planning on purpose")
@pytest.mark.parametrize("where", ["geometry", "probe", "planning"])
async def test_an_exception_while_planning_fails_that_request_and_the_queue_moves_on(
        world: World, where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Was a wedge: "scheduler step failed" was logged, the request stayed at the head of the queue
    # and every load behind it waited for ever (issue #13, context_length -1 in a GGUF).
    broken = "/models/bad.gguf"
    if where == "geometry":
        real_geometry = world.geometry

        def geometry(path: str) -> ModelGeometry:
            if path == broken:
                raise RuntimeError("injected: a header the planner cannot use")
            return real_geometry(path)

        monkeypatch.setattr(world, "geometry", geometry)
    elif where == "probe":
        real_probe = world.probe
        calls = {"n": 0}

        def probe() -> tuple[int, list[Device]]:
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError("injected: the memory probe failed")
            return real_probe()

        monkeypatch.setattr(world, "probe", probe)
    s = world.scheduler()
    if where == "planning":
        real_plan = s._plan

        def plan(est: Any, sp: LoadSpec, free_ram: int, gpus: list[Device]) -> Any:
            if sp.name == "bad":
                raise ValueError("injected: layer counts and sizes must not be negative")
            return real_plan(est, sp, free_ram, gpus)

        monkeypatch.setattr(s, "_plan", plan)
    bad = asyncio.ensure_future(s.acquire(spec("bad")))
    good = asyncio.ensure_future(s.acquire(spec("good")))
    with pytest.raises(errors.LocalrunError, match="injected"):
        await asyncio.wait_for(bad, 5)
    lease = await asyncio.wait_for(good, 5)  # the request behind it is served
    assert lease.model.name == "good"
    lease.release()
    again = await asyncio.wait_for(s.acquire(spec("good")), 5)
    again.release()
    await s.close()
