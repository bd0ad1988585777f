"""The prefix cache's second tier: KV segments kept in host RAM, out of the llama context.

Why: every cell the context holds is scanned by every decode step. llama.cpp's attention runs over
all cells up to the highest one in use, masked or not, so cached prefixes that nobody is using
slow down everyone who decodes (Qwen2.5-Coder 0.5B on 2 EPYC cores: 15.7 ms a token with an empty
context, 19.1 ms beside 8,000 idle cached cells, 22.9 ms beside 32,000; BENCHMARKS.md). So while
requests run the context keeps no idle cached cells (``kvcache.RESIDENT_IDLE_CELLS``): the prefix
tree's idle leaves move here instead of being forgotten: a later request
that continues one of them gets it back with one ``llama_state_seq_set_data`` (a memory copy,
~12 KB a token for Qwen) instead of computing it again. llama.cpp's server does the same with
its ``--cache-ram`` prompt cache; SGLang's hierarchical cache is the same idea.

A :class:`Segment` is what a tree leaf held when it was evicted: the KV of its own positions
``[start, end)`` as llama.cpp serialises one sequence, and the whole token path ``[0, end)`` it
continues. It is usable only while the path's first ``start`` tokens are cached in the context
(in the tree, or brought back first from here: :meth:`HostCache.best` finds one segment, the
caller repeats). Segments are evicted least recently used first when their bytes exceed
``max_bytes``; a segment whose parent was evicted simply stops matching anything and ages out.

Finding a segment costs what the prompt's candidates cost, not what the whole tier holds: a small
model's 2 GiB hold tens of thousands of segments, and comparing each at every admission cost the
first token milliseconds (benchmarks/tiny_serving.py). Each segment is indexed by its start, the
:data:`ANCHOR` tokens before it and the token at it; a candidate that agrees there is confirmed on
its whole prefix before it is used.

Pure Python (no llama_cpp): the engine thread owns it; nothing here is thread-safe.
"""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from dataclasses import dataclass

from .radix import common_prefix_len

ANCHOR = 32  # tokens before a segment's start that its index key holds (with the token at its start)


@dataclass(eq=False, slots=True)
class Segment:
    """The KV of positions ``[start, len(path))`` of the token path ``path``."""

    path: list[int]
    start: int
    state: bytearray  # llama_state_seq_get_data of one sequence holding exactly those positions

    @property
    def end(self) -> int:
        return len(self.path)

    @property
    def n_bytes(self) -> int:
        return len(self.state)


class HostCache:
    """Evicted prefix-tree leaves in RAM, least recently used first out, at most ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._segments: OrderedDict[int, Segment] = OrderedDict()  # oldest first
        self._index: dict[tuple[int, tuple[int, ...]], set[int]] = {}  # _anchor(path, start) -> segment ids
        self._starts: Counter[int] = Counter()  # how many segments start at each position
        self._ids = itertools.count()
        self._bytes = 0
        self.restored_tokens = 0  # cumulative, for stats
        self.skipped_tokens = 0   # cumulative: tokens of segments left for the step to recompute (kvcache.py)

    def __len__(self) -> int:
        return len(self._segments)

    @property
    def n_bytes(self) -> int:
        return self._bytes

    @property
    def n_tokens(self) -> int:
        return sum(s.end - s.start for s in self._segments.values())

    def put(self, path: list[int], start: int, state: bytearray) -> bool:
        """Keep ``state`` (positions ``[start, len(path))`` of ``path``); False when it cannot fit.

        A segment with the same path and start replaces the older copy.
        """
        if not state or start >= len(path) or len(state) > self.max_bytes:
            return False
        anchor = _anchor(path, start)
        for key in self._index.get(anchor, ()):
            old = self._segments[key]
            if old.end == len(path) and old.path == path:
                self._remove(key)
                break
        key = next(self._ids)
        self._segments[key] = Segment(path, start, state)
        self._index.setdefault(anchor, set()).add(key)
        self._starts[start] += 1
        self._bytes += len(state)
        while self._bytes > self.max_bytes:
            self._remove(next(iter(self._segments)))
        return True

    def best(self, prompt: list[int], cached: int, *, take: bool = True) -> Segment | None:
        """The segment that extends a cached prefix of ``cached`` tokens of ``prompt`` the most.

        Candidates continue a prefix the context holds: ``start <= cached``, and their path agrees
        with ``prompt`` up to ``start`` and beyond ``cached`` (a short segment still counts: it may
        be the first link of a chain of segments, each evicted from its own tree node). The
        segment is removed from this cache (the caller puts it into the context) and its bytes
        are freed; with ``take`` False it stays (a look ahead). None when no segment qualifies.
        """
        if cached >= len(prompt):  # nothing can reach further than the prompt
            return None
        found: list[tuple[int, int]] = []  # (-tokens it reaches, id): the longest first, then the oldest
        for start in self._starts:
            if start > cached:
                continue
            for key in self._index.get(_anchor(prompt, start), ()):
                seg = self._segments[key]
                if seg.end <= cached or seg.path[cached] != prompt[cached]:  # cannot reach beyond ``cached``
                    continue
                length = start + common_prefix_len(seg.path, prompt, start)
                if length > cached:
                    found.append((-length, key))
        for _, key in sorted(found):
            seg = self._segments[key]
            if seg.path[: seg.start] == prompt[: seg.start]:  # the anchor agreed; the whole prefix must too
                if take:
                    self._remove(key)
                return seg
        return None

    def segments(self) -> list[Segment]:
        """Every segment, most recently stored first (for saving to disk)."""
        return list(reversed(self._segments.values()))

    def clear(self) -> None:
        self._segments.clear()
        self._index.clear()
        self._starts.clear()
        self._bytes = 0

    def _remove(self, key: int) -> None:
        seg = self._segments.pop(key)
        self._bytes -= len(seg.state)
        anchor = _anchor(seg.path, seg.start)
        ids = self._index[anchor]
        ids.discard(key)
        if not ids:
            del self._index[anchor]
        self._starts[seg.start] -= 1
        if not self._starts[seg.start]:
            del self._starts[seg.start]


def _anchor(path: list[int], start: int) -> tuple[int, tuple[int, ...]]:
    """A segment's index key: its start, the :data:`ANCHOR` tokens of ``path`` before it and the one
    at it. A prompt the segment extends agrees with it there, so the prompt's own key at each start
    finds every candidate (and a few more, which the whole-prefix check turns away)."""
    return start, tuple(path[max(0, start - ANCHOR): start + 1])

