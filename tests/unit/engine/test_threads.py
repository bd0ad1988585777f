"""The thread policy (engine/threads.py): fewer threads when other processes take cores, more when they leave."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from localrun.engine.threads import INTERVAL, CpuTimes, ThreadPolicy, usable_cores


class FakeCpu:
    """A machine whose other processes use ``other`` cores and this process ``own`` cores."""

    def __init__(self) -> None:
        self.now = 0.0
        self.busy = 0.0
        self.own_total = 0.0
        self.other = 0.0
        self.own = 2.0

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.busy += (self.other + self.own) * seconds
        self.own_total += self.own * seconds

    def read(self) -> CpuTimes:
        return CpuTimes(self.now, self.busy, self.own_total)


def policy(cpu: FakeCpu, cores: int = 2, pinned: int | None = None) -> ThreadPolicy:
    return ThreadPolicy(cores=cores, pinned=pinned, reader=cpu.read, clock=lambda: cpu.now)


def run(cpu: FakeCpu, p: ThreadPolicy, seconds: float) -> tuple[int, int]:
    """Engine steps of 20 ms for ``seconds``; the counts at the end."""
    for _ in range(round(seconds / 0.02)):
        cpu.advance(0.02)
        t = p.update()
    return t.decode, t.prefill


def test_a_quiet_machine_gets_every_core() -> None:
    cpu = FakeCpu()
    p = policy(cpu)
    assert run(cpu, p, 3.0) == (2, 2)
    assert p.current().reason() == "2 threads: every core is free"


def test_a_busy_core_is_given_up_within_a_second_and_taken_back_within_two() -> None:
    cpu = FakeCpu()
    p = policy(cpu)
    run(cpu, p, 1.0)
    cpu.other = 1.0  # a build starts on one core
    assert run(cpu, p, INTERVAL + 0.1) == (1, 1)
    assert p.current().other_load == pytest.approx(1.0, abs=0.05)
    assert "other processes use 1.0 cores" in p.current().reason()
    cpu.other = 0.0
    assert run(cpu, p, 0.6)[0] == 1, "one quiet sample is not enough to add threads back"
    assert run(cpu, p, 1.2) == (2, 2)


def test_what_ran_while_the_engine_was_idle_does_not_count() -> None:
    """Another server busy while this engine waited (a benchmark measuring them in turn): the first sample
    after the pause spans that load and is not acted on; the next quarter second of work decides."""
    cpu = FakeCpu()
    p = policy(cpu)
    run(cpu, p, 1.0)
    p.idle()
    cpu.own, cpu.other = 0.0, 2.0  # idle here, the other server computes
    cpu.advance(5.0)
    cpu.own, cpu.other = 2.0, 0.0
    assert run(cpu, p, 0.1) == (2, 2)
    assert run(cpu, p, 1.0) == (2, 2)
    p.idle()
    cpu.own, cpu.other = 0.0, 1.0  # and a load that stays is seen within a quarter second of work
    cpu.advance(5.0)
    assert run(cpu, p, 0.6) == (1, 1)


def test_long_steps_follow_the_load_too() -> None:
    """A long prompt at depth: every step takes seconds, so every sample spans seconds of work. Load that
    went away during one is seen at the next step."""
    cpu = FakeCpu()
    p = policy(cpu)
    run(cpu, p, 1.0)
    cpu.own, cpu.other = 2.0, 1.0
    assert run(cpu, p, 0.3) == (1, 1)
    cpu.own, cpu.other = 1.0, 0.0  # one thread now; the other process is done
    for _ in range(2):
        cpu.advance(12.0)  # one prefill step
        t = p.update()
    assert (t.decode, t.prefill) == (2, 2)
    cpu.own, cpu.other = 2.0, 1.0  # and load that comes back during a long step is seen after it
    cpu.advance(12.0)
    t = p.update()
    assert (t.decode, t.prefill) == (1, 1)


def test_the_count_is_unsettled_from_an_idle_spell_until_work_is_sampled() -> None:
    cpu = FakeCpu()
    p = policy(cpu)
    assert not p.settled  # nothing sampled yet
    run(cpu, p, 0.3)
    assert p.settled
    p.idle()
    cpu.own = 0.0
    cpu.advance(5.0)  # the engine sits idle
    cpu.own = 2.0
    run(cpu, p, 0.02)
    assert not p.settled  # the sample over the idle spell did not count
    run(cpu, p, 0.3)
    assert p.settled
    pinned = policy(FakeCpu(), pinned=1)
    assert pinned.settled
    assert ThreadPolicy(cores=2, reader=lambda: None).settled  # no /proc: nothing will ever be sampled


def test_light_load_keeps_prefill_threads_but_not_decode_ones() -> None:
    """A core a browser uses 30 % of still prefills (compute-bound) but no longer decodes (a stalled barrier
    costs a memory-bound step far more than the thread brings)."""
    cpu = FakeCpu()
    cpu.other = 0.3
    p = policy(cpu)
    assert run(cpu, p, 1.0) == (1, 2)


def test_several_busy_cores_on_a_big_machine() -> None:
    cpu = FakeCpu()
    cpu.own, cpu.other = 8.0, 5.0
    p = policy(cpu, cores=16)
    assert run(cpu, p, 1.0) == (11, 11)


def test_never_fewer_than_one_thread() -> None:
    cpu = FakeCpu()
    cpu.other = 7.0
    p = policy(cpu)
    assert run(cpu, p, 1.0) == (1, 1)


def test_two_models_streaming_settle_on_sharing_the_cores() -> None:
    """Two runners, each with the policy: each sees the other's spinning threads as other load."""
    a, b = FakeCpu(), FakeCpu()
    pa, pb = policy(a), policy(b)
    for _ in range(100):  # 2 s of 20 ms steps, each machine's "other" is the other runner's threads
        for cpu, mine, theirs in ((a, pa, pb), (b, pb, pa)):
            share = 2.0 * mine.current().decode / (mine.current().decode + theirs.current().decode)
            cpu.own, cpu.other = share, 2.0 - share
            cpu.advance(0.02)
            mine.update()
    assert (pa.current().decode, pb.current().decode) == (1, 1)


def test_num_thread_pins_both_counts() -> None:
    cpu = FakeCpu()
    cpu.other = 1.5
    p = policy(cpu, pinned=3)
    assert run(cpu, p, 2.0) == (3, 3)
    assert p.current().pinned
    assert p.current().reason() == "3 threads, pinned by num_thread"


def test_no_proc_keeps_every_core() -> None:
    p = ThreadPolicy(cores=4, reader=lambda: None)
    assert (p.update().decode, p.update().prefill) == (4, 4)


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(usable_cores()) < 2,
                    reason="reads /proc and needs two cores")
def test_the_real_reader_sees_a_busy_process() -> None:
    """Against this machine's /proc: a process spinning on one core shows up as about one core of other load."""
    p = ThreadPolicy()  # this process's own waiting counts as engine work here: only other load matters
    spin = "import time\nend = time.time() + 20\nwhile time.time() < end: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if p.update().other_load >= 0.5:
                break
        assert p.current().other_load >= 0.5, p.current()
        assert p.current().decode < p.cores
    finally:
        busy.kill()
        busy.wait()


def requests_one_after_another(cpu: FakeCpu, p: ThreadPolicy, seconds: float) -> tuple[int, int]:
    """A client sending one request after another: 45 ms of engine work, then 5 ms idle while the
    client reads the reply and sends the next (its CPU is whatever ``cpu.other`` says)."""
    t = p.current()
    for _ in range(round(seconds / 0.05)):
        for _ in range(3):
            cpu.advance(0.015)
            t = p.update()
        p.idle()
        cpu.advance(0.005)
    return t.decode, t.prefill


def test_short_pauses_between_requests_do_not_hide_the_load_beside_them() -> None:
    """A tiny model's client takes 0.4 of a core reading tokens as fast as they come: the engine,
    idle a few milliseconds between requests, still sees it and decodes on the free core."""
    cpu = FakeCpu()
    p = policy(cpu)
    assert requests_one_after_another(cpu, p, 1.0) == (2, 2)  # pauses alone change nothing
    assert p.settled
    cpu.other = 0.4
    assert requests_one_after_another(cpu, p, 1.0) == (1, 2)
    assert p.settled


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(usable_cores()) < 2,
                    reason="reads /proc and needs two cores")
def test_the_real_reader_counts_the_daemon_as_other_load() -> None:
    """The runner's parent (the daemon) writes replies while the next step computes, on a core the
    spinning threads would want: a runner whose parent spins sees about one core of other load."""
    runner = (
        "import time\nfrom localrun.engine.threads import ThreadPolicy\np = ThreadPolicy()\n"
        "end = time.monotonic() + 10\n"
        "while time.monotonic() < end and p.update().other_load < 0.5: time.sleep(0.2)\n"
        "print(p.current().other_load)"
    )
    child = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, text=True)
    try:
        while child.poll() is None:  # this process is the child's parent: keep one core busy
            end = time.monotonic() + 0.05
            while time.monotonic() < end:
                pass
        assert child.stdout is not None
        assert float(child.stdout.read()) >= 0.5
    finally:
        child.kill()
        child.wait()
