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

Pure Python (no llama_cpp): the engine thread owns it; nothing here is thread-safe.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

from .radix import common_prefix_len


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
        self._ids = itertools.count()
        self._bytes = 0
        self.restored_tokens = 0  # cumulative, for stats

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
        for key, old in self._segments.items():
            if old.start == start and old.end == len(path) and old.path == path:
                self._remove(key)
                break
        self._segments[next(self._ids)] = Segment(path, start, state)
        self._bytes += len(state)
        while self._bytes > self.max_bytes:
            self._remove(next(iter(self._segments)))
        return True

    def best(self, prompt: list[int], cached: int) -> Segment | None:
        """The segment that extends a cached prefix of ``cached`` tokens of ``prompt`` the most.

        Candidates continue a prefix the context holds: ``start <= cached``, and their path agrees
        with ``prompt`` up to ``start`` and beyond ``cached`` (a short segment still counts: it may
        be the first link of a chain of segments, each evicted from its own tree node). The
        segment is removed from this cache (the caller puts it into the context) and its bytes
        are freed. None when no segment qualifies.
        """
        best_key, best_len = -1, cached
        for key, seg in self._segments.items():
            if seg.start > cached or seg.end <= best_len:
                continue
            if seg.path[seg.start - 1: seg.start] != prompt[seg.start - 1: seg.start]:
                continue  # cheap reject before comparing the whole prefix
            if seg.path[: seg.start] != prompt[: seg.start]:
                continue
            length = seg.start + common_prefix_len(seg.path, prompt, seg.start)
            if length > best_len:
                best_key, best_len = key, length
        if best_key < 0:
            return None
        seg = self._segments[best_key]
        self._remove(best_key)
        return seg

    def segments(self) -> list[Segment]:
        """Every segment, most recently stored first (for saving to disk)."""
        return list(reversed(self._segments.values()))

    def clear(self) -> None:
        self._segments.clear()
        self._bytes = 0

    def _remove(self, key: int) -> None:
        seg = self._segments.pop(key)
        self._bytes -= len(seg.state)

