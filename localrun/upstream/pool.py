"""Pools of upstream members and the choice of one for a request (pure: no I/O, clock passed in).

A pool is every configured URL under one upstream NAME. For a request, :meth:`Pool.order` ranks
the members that serve its model:

1. members not cooling down, before those that are (a cooling member is tried only when every
   other one failed: better a late answer than none);
2. among the healthy, the member that last served the longest prefix of this conversation
   (its prefix cache holds it: SGLang's cache-aware routing), unless it has more than
   :data:`AFFINITY_SLACK` requests in flight beyond the least-loaded member;
3. then the fewest requests in flight (localrun's own), then the fewest requests sent
   (round robin when idle).

State changes: :meth:`Member.begin` / :meth:`Member.end` count in-flight requests;
:meth:`Member.succeeded` records latency and clears failures; :meth:`Member.failed` cools the
member down for BASE_COOL_DOWN_S doubling per consecutive failure up to MAX_COOL_DOWN_S;
a health check that answers (:meth:`Member.checked`) ends the cool-down. All of it runs on the
daemon's event loop (one thread), so no lock is needed.

Affinity keys are a hash chain over a request's segments (tools + model, then each message):
key i stands for the first i segments, so a later turn of the same conversation finds the
member that served the earlier ones by its longest known key.
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .spec import Api, UpstreamSpec

AFFINITY_SLACK = 2           # in-flight requests an affinity member may have beyond the least-loaded one
MAX_AFFINITY_KEYS = 20_000   # per pool, least recently used dropped first
BASE_COOL_DOWN_S = 5.0
MAX_COOL_DOWN_S = 60.0
LATENCY_WEIGHT = 0.3         # weight of the newest sample in the moving average


class MemberState(enum.Enum):
    UNKNOWN = "unknown"    # not checked yet, no request answered
    HEALTHY = "healthy"
    COOLING = "cooling"    # failed recently: skipped until a health check answers or the cool-down ends


@dataclass(slots=True)
class Member:
    """One server of a pool and what localrun knows of it. Mutated on the event loop only."""

    spec: UpstreamSpec
    api: Api | None = None                 # the spec's, or what the first check found
    listed: tuple[str, ...] | None = None  # models the server listed at its last check
    in_flight: int = 0
    requests: int = 0
    failures: int = 0                      # cumulative
    consecutive_failures: int = 0
    cool_until: float = 0.0
    latency_s: float | None = None         # moving average of the time to the first event
    last_error: str | None = None
    checked_at: float | None = None
    answered: bool = False                 # a check or a request succeeded at least once

    def __post_init__(self) -> None:
        if self.api is None:
            self.api = self.spec.api

    @property
    def url(self) -> str:
        return self.spec.url

    def state(self, now: float) -> MemberState:
        if self.cool_until > now:
            return MemberState.COOLING
        return MemberState.HEALTHY if self.answered else MemberState.UNKNOWN

    def models(self) -> tuple[str, ...] | None:
        """What it serves: the configured list, else what it listed, else None (not known yet)."""
        return self.spec.models if self.spec.models is not None else self.listed

    def serves(self, model: str) -> str | None:
        """The member's own name for ``model`` (``x`` may be listed as ``x:latest``), or None.

        A member whose models are not known yet is assumed to serve it (asking will tell).
        """
        known = self.models()
        if known is None:
            return model
        if model in known:
            return model
        if ":" not in model.rsplit("/", 1)[-1] and f"{model}:latest" in known:
            return f"{model}:latest"
        if model.endswith(":latest") and model.removesuffix(":latest") in known:
            return model.removesuffix(":latest")
        return None

    def begin(self) -> None:
        self.in_flight += 1
        self.requests += 1

    def end(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    def succeeded(self, latency_s: float | None = None) -> None:
        self.answered = True
        self.consecutive_failures = 0
        self.cool_until = 0.0
        if latency_s is not None:
            self.latency_s = latency_s if self.latency_s is None else (
                (1 - LATENCY_WEIGHT) * self.latency_s + LATENCY_WEIGHT * latency_s)

    def failed(self, now: float, reason: str) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = reason
        self.cool_until = now + min(MAX_COOL_DOWN_S, BASE_COOL_DOWN_S * 2 ** (self.consecutive_failures - 1))

    def checked(self, now: float, api: Api, listed: tuple[str, ...] | None) -> None:
        """A health check answered: back in rotation."""
        self.api, self.listed, self.checked_at = api, listed, now
        self.answered = True
        self.consecutive_failures = 0
        self.cool_until = 0.0

    def check_failed(self, now: float, reason: str) -> None:
        self.checked_at = now
        self.failed(now, reason)


@dataclass(slots=True)
class Pool:
    """The members under one upstream NAME and its affinity memory."""

    name: str
    members: list[Member]
    _affinity: OrderedDict[bytes, str] = field(default_factory=OrderedDict)  # key -> member url

    def serving(self, model: str) -> list[Member]:
        return [m for m in self.members if m.serves(model) is not None]

    def models(self) -> list[str]:
        """Every model some member serves (known lists only), in first-seen order."""
        seen: dict[str, None] = {}
        for m in self.members:
            for name in m.models() or ():
                seen.setdefault(name, None)
        return list(seen)

    def order(self, model: str, now: float, keys: Sequence[bytes] = ()) -> list[Member]:
        """The members serving ``model``, best first (see the module docstring)."""
        candidates = self.serving(model)
        healthy = [m for m in candidates if m.state(now) is not MemberState.COOLING]
        cooling = sorted((m for m in candidates if m.state(now) is MemberState.COOLING), key=lambda m: m.cool_until)
        ranked = sorted(healthy, key=lambda m: (m.in_flight, m.requests))
        preferred = self._affine(keys, ranked)
        if preferred is not None and preferred.in_flight <= ranked[0].in_flight + AFFINITY_SLACK:
            ranked.remove(preferred)
            ranked.insert(0, preferred)
        return ranked + cooling

    def _affine(self, keys: Sequence[bytes], members: Iterable[Member]) -> Member | None:
        by_url = {m.url: m for m in members}
        for key in reversed(keys):
            url = self._affinity.get(key)
            if url is not None and url in by_url:
                self._affinity.move_to_end(key)
                return by_url[url]
        return None

    def remember(self, keys: Sequence[bytes], member: Member) -> None:
        """``member`` served a request whose prefixes are ``keys``."""
        for key in keys:
            self._affinity[key] = member.url
            self._affinity.move_to_end(key)
        while len(self._affinity) > MAX_AFFINITY_KEYS:
            self._affinity.popitem(last=False)


def prefix_keys(segments: Iterable[str]) -> list[bytes]:
    """The hash chain over ``segments``: key i identifies segments[0..i]."""
    keys: list[bytes] = []
    digest = b""
    for seg in segments:
        digest = hashlib.blake2b(digest + seg.encode("utf-8", "replace"), digest_size=16).digest()
        keys.append(digest)
    return keys


def text_segments(prompt: str, size: int = 1024) -> list[str]:
    """A raw prompt cut in fixed-size pieces (affinity for completions: a shared prefix shares keys)."""
    return [prompt[i:i + size] for i in range(0, len(prompt), size)] or [""]


def latency_ms(member: Member) -> float | None:
    return None if member.latency_s is None or math.isnan(member.latency_s) else member.latency_s * 1000
