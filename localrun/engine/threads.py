"""How many threads llama.cpp's CPU kernels get: the cores that are free, re-checked while the engine runs.

ggml's worker threads spin at every barrier of a step, so one thread that waits for a core another
process holds stalls all of them: on a 2-vCPU EPYC with one core kept busy, Qwen2.5-Coder 0.5B
decoded at 1-5 tok/s with 2 threads and at 50 with 1 (ENGINE_NOTES.md). The right count is the
number of cores nobody else is using, and it changes while a desktop runs (a build starts, a
browser tab goes quiet, another model starts streaming).

:class:`ThreadPolicy` measures it. Every :data:`INTERVAL` seconds of engine work (a quarter second) it reads how much
CPU time the cores this process may run on spent busy (``/proc/stat``, steal included: a VM whose
host takes the core is as busy as one a build takes) and subtracts what this process spent: the
rest, in cores' worth, is other load. That includes the daemon feeding the runner: its work per
token (reading the runner's frames, writing the reply) runs while the next step computes and
takes a core from spinning threads like anyone's (a tiny model at one stream, the daemon at 0.3
of a core: 68-72 ms a 128-token request on one thread, 80-109 ms on two). A core
counts as free while the other load on it stays under a tolerance, which differs by the kind of
step:

- **decode** (a token per sequence, memory-bound): a thread fewer costs little, a contended one
  costs up to 30x, so any core with more than :data:`DECODE_TOLERANCE` of other load is left out;
- **prefill** (prompt chunks, compute-bound): each thread does real work, so a core is given up only
  when other load on it passes :data:`PREFILL_TOLERANCE`.

Only samples of engine work count: the engine says when it is about to sit idle
(:meth:`ThreadPolicy.idle`), and a sample that was mostly idle (more than :data:`IDLE_SHARE` of it)
only starts the next one, because what ran meanwhile (often the very load that kept it idle: another
server being measured in turn) says nothing about now. Short pauses do not void a sample: a client
sending one request after another leaves the engine idle a few milliseconds every few tens, and
what it does in them (reading the last reply, sending the next) competes with the engine's threads
as much as anything else does; discarding those samples left a tiny model on two spinning threads
beside its own client, at 0.6x the speed of one thread. A sample of work counts however long it is
(a step of a long prompt at depth takes seconds). Fewer threads take effect at the next
sample (load appeared: act at once); more only when two samples in a row allow them, or one
spanning :data:`CONFIRM` (load went away: make sure), so the count follows a change within a
quarter to half a second, or one step where a step is longer, and does not flap.

From an idle spell until a sample of work counts, the count is *unsettled*
(:attr:`ThreadPolicy.settled`: it was decided before the spell), and the batcher keeps the step to
one physical batch, so a long prompt does not spend seconds of prefill on a count nobody has
checked (at 16k tokens a first step of 2,048 tokens ran 22-27 s on one thread because llama-server
had tokenized the benchmark's prompts while the engine waited).

Two models streaming at once see each other as other load and settle on sharing the cores instead
of each spinning on all of them.

``num_thread`` (a request, a Modelfile, ``LOCALRUN_NUM_THREAD``) pins both counts. Where
``/proc/stat`` does not exist (macOS, Windows) the policy keeps every core, as before.

Owned by the engine thread; :meth:`ThreadPolicy.current` may be read from any thread.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

INTERVAL = 0.25          # seconds of engine work between two samples
CONFIRM = 2 * INTERVAL   # a sample this long allows more threads on its own (two samples' worth of evidence)
DECODE_TOLERANCE = 0.2   # other load (in cores) a core may carry and still decode
PREFILL_TOLERANCE = 0.5  # ... and still prefill
IDLE_SHARE = 0.5         # a sample idle for more than this share of its span does not count
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # /proc/stat: user nice system irq softirq steal (guest is inside user)


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """A reading: ``busy`` seconds the usable cores spent working since boot, ``own`` seconds of it
    this process used, at monotonic time ``wall``."""

    wall: float
    busy: float
    own: float


@dataclass(frozen=True, slots=True)
class Threads:
    """The counts in use and why: ``other_load`` is the cores' worth of CPU other processes took in
    the last sample (0.0 before the first, or when pinned)."""

    decode: int
    prefill: int
    cores: int
    other_load: float = 0.0
    pinned: bool = False

    def reason(self) -> str:
        """One line for ``localrun ps``."""
        if self.pinned:
            return f"{self.decode} threads, pinned by num_thread"
        if self.decode == self.prefill == self.cores:
            return f"{self.cores} threads: every core is free"
        return (f"{self.decode} threads to decode, {self.prefill} to prefill, of {self.cores} cores: "
                f"other processes use {self.other_load:.1f} cores")


def usable_cores() -> list[int]:
    """The CPUs this process may run on (its affinity), capped by a cgroup CPU quota."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = list(range(os.cpu_count() or 1))
    quota = _cgroup_quota()
    if quota is not None and quota < len(cpus):
        cpus = cpus[:max(1, math.ceil(quota))]
    return cpus or [0]


def _cgroup_quota() -> float | None:
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0


def proc_reader(cpus: list[int]) -> Callable[[], CpuTimes | None]:
    """A reader of :class:`CpuTimes` for ``cpus`` from ``/proc``; it returns None where there is none."""
    names = {f"cpu{c}" for c in cpus}
    hz = _ticks()

    def read() -> CpuTimes | None:
        try:
            with open("/proc/stat", "rb") as f:
                busy = 0
                for line in f:
                    if not line.startswith(b"cpu"):
                        break
                    fields = line.split()
                    if fields[0].decode() in names:
                        busy += sum(int(fields[1 + i]) for i in _BUSY_FIELDS if 1 + i < len(fields))
        except (OSError, ValueError):
            return None
        t = os.times()
        return CpuTimes(time.monotonic(), busy / hz, t.user + t.system)

    return read


class ThreadPolicy:
    """Chooses decode and prefill thread counts from the free cores (module docstring)."""

    def __init__(self, *, pinned: int | None = None, cores: int | None = None,
                 reader: Callable[[], CpuTimes | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``reader`` and ``clock`` are seams for tests (a reader's ``wall`` comes from ``clock``)."""
        cpus = usable_cores()
        self._clock = clock
        self._lock = threading.Lock()
        self.cores = cores or len(cpus)
        self.settled = True  # whether a sample has counted since the engine last sat idle (module docstring)
        self._idle_since: float | None = None  # when the engine began to sit idle (None: it works)
        self._idle = 0.0  # seconds it sat idle during the sample in progress
        if pinned:
            self._current = Threads(pinned, pinned, self.cores, pinned=True)
            self._read: Callable[[], CpuTimes | None] | None = None
            return
        self._current = Threads(self.cores, self.cores, self.cores)
        self._read = reader or proc_reader(cpus)
        self._last = self._read()
        self.settled = self._last is None  # no sample has counted yet (and none ever will without /proc)
        self._allowed = (self.cores, self.cores)  # what the previous sample allowed

    def idle(self) -> None:
        """The engine is about to wait for work: the time until it asks again (:meth:`update`) is
        idle time in the sample in progress (module docstring)."""
        if self._idle_since is None:
            self._idle_since = self._clock()

    def current(self) -> Threads:
        return self._current

    def update(self) -> Threads:
        """Take a sample if :data:`INTERVAL` has passed since the last one; the counts to use now.

        Thread-safe: the engine thread and a pooled context (embeddings, reranking) may both ask."""
        if self._read is None or self._last is None:
            return self._current
        now = self._clock()
        since = self._idle_since
        if since is not None:  # working again
            self._idle_since = None
            self._idle += now - since
        if now - self._last.wall < INTERVAL:
            return self._current
        with self._lock:
            return self._sample()

    def _sample(self) -> Threads:
        assert self._read is not None and self._last is not None
        if self._clock() - self._last.wall < INTERVAL:  # another thread sampled while this one waited
            return self._current
        reading = self._read()
        if reading is None or reading.wall <= self._last.wall:
            return self._current
        last, self._last = self._last, reading
        span, idle, self._idle = reading.wall - last.wall, self._idle, 0.0
        if idle > IDLE_SHARE * span:  # mostly what ran while the engine sat idle: the next INTERVAL of work decides
            self.settled = False
            return self._current
        self.settled = True
        own = reading.own - last.own
        other = max(0.0, ((reading.busy - last.busy) - own) / span)
        allowed = (self._fit(other, DECODE_TOLERANCE), self._fit(other, PREFILL_TOLERANCE))
        cur = self._current
        # fewer threads at once, more only when the previous sample allowed them too or this one was long
        confirmed = allowed if span >= CONFIRM else self._allowed
        decode = allowed[0] if allowed[0] <= cur.decode else max(cur.decode, min(allowed[0], confirmed[0]))
        prefill = allowed[1] if allowed[1] <= cur.prefill else max(cur.prefill, min(allowed[1], confirmed[1]))
        self._allowed = allowed
        self._current = Threads(decode, prefill, self.cores, round(min(other, float(self.cores)), 2))
        if (decode, prefill) != (cur.decode, cur.prefill):
            log.info("threads now %s", self._current.reason())
        return self._current

    def _fit(self, other: float, tolerance: float) -> int:
        """Cores left when every core carrying more than ``tolerance`` of the other load is given up."""
        taken = max(0, math.ceil(other - tolerance))
        return max(1, min(self.cores, self.cores - taken))


__all__ = ["CpuTimes", "ThreadPolicy", "Threads", "usable_cores"]
