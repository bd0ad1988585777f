"""BoundedPool hand-off: a worker that died before taking a job costs nothing; one that died running it fails it.

What the OOM killer does on a full machine (SIGKILL to the daemon's children) must not cost the next
chat request: the job goes to a fresh worker. A worker killed while it runs a job (its CPU limit, a
kill from outside) still fails that job, once: limits are enforced by killing, so a job is never
sent again after its worker acknowledged it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from localrun.chat.prompt import render_pair
from localrun.errors import TemplateLimit
from localrun.runtime import bounded
from localrun.runtime.bounded import BoundedPool, Limits

MESSAGES = [{"role": "user", "content": "hi"}]
SORTS = "{% for i in range(1000) %}{{ ((range(100000)|list) * 10)|sort|length }}{% endfor %}"  # ~100 s of CPU


@pytest.fixture
def pool() -> Iterator[BoundedPool]:
    p = BoundedPool(2, Limits(cpu_seconds=60, wall_seconds=60), error=TemplateLimit, what="the chat template")
    yield p
    p.close()


def workers() -> list[psutil.Process]:
    """This process's live worker processes."""
    found = []
    for child in psutil.Process().children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "localrun.runtime.bounded_child" in child.cmdline():
                found.append(child)
        except psutil.Error:  # gone meanwhile
            pass
    return found


def kill_all(procs: list[psutil.Process]) -> None:
    """SIGKILL ``procs`` and wait until they are dead, leaving them unreaped (as the OOM killer does)."""
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while {p.pid for p in workers()} & {p.pid for p in procs} and time.monotonic() < deadline:
        time.sleep(0.01)


def render(pool: BoundedPool, source: str = "{{ messages[0].content }}") -> object:
    return pool.run(render_pair, source, MESSAGES, None)


def test_a_job_after_every_idle_worker_was_killed_succeeds_on_new_workers(pool: BoundedPool) -> None:
    threads = [threading.Thread(target=render, args=(pool,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    before = workers()
    assert before
    kill_all(before)
    assert render(pool) == ["hi", None]  # was: "the chat template was stopped: could not send the job (Broken pipe)"
    assert render(pool) == ["hi", None]
    assert not {p.pid for p in before} & {p.pid for p in workers()}


def test_a_worker_killed_after_the_job_was_sent_but_before_it_took_it_hands_the_job_on(pool: BoundedPool) -> None:
    assert render(pool) == ["hi", None]
    (frozen,) = workers()
    frozen.send_signal(signal.SIGSTOP)  # it cannot read the job: the frame waits in the pipe
    killer = threading.Timer(0.5, frozen.send_signal, (signal.SIGKILL,))
    killer.start()
    try:
        assert render(pool) == ["hi", None]
    finally:
        killer.cancel()
    assert frozen.pid not in {p.pid for p in workers()}


def test_a_worker_killed_while_it_runs_a_job_fails_that_job_once(pool: BoundedPool) -> None:
    assert render(pool) == ["hi", None]
    (busy,) = workers()
    killer = threading.Timer(1.0, busy.send_signal, (signal.SIGKILL,))
    killer.start()
    started = time.monotonic()
    with pytest.raises(TemplateLimit, match="was stopped: it was killed"):
        render(pool, SORTS)
    assert time.monotonic() - started < 10  # not sent again: SORTS on a new worker would run for a minute
    assert render(pool) == ["hi", None]


def test_workers_that_never_take_a_job_fail_it_after_a_bounded_number_of_tries(
        pool: BoundedPool, monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[float] = []
    real_init = bounded._Worker.__init__

    def counted(self: bounded._Worker, limits: Limits) -> None:
        starts.append(time.monotonic())
        real_init(self, limits)
        self.proc.kill()  # as if it died at start-up, before reading anything

    monkeypatch.setattr(bounded._Worker, "__init__", counted)
    with pytest.raises(TemplateLimit, match="3 worker processes in a row died before taking the job"):
        render(pool)
    assert len(starts) == 3
