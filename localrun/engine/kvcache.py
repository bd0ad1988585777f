"""The unified KV cache of one context: sequence ids, the shared prefix tree, eviction.

Every llama sequence id is in exactly one state:

- free: holds no cells;
- active: a running request's sequence; it holds positions ``[0, n_past)``, of which
  ``[0, lease.shared_len)`` are the tree's cells (copied with ``llama_memory_seq_cp``, so a
  prefix exists once) and the rest are private;
- idle holder: a finished request's sequence kept as cache; it owns one tree leaf and holds
  exactly the positions of the path from the root to that leaf.
- holding: cached cells an active request reuses past a part of its prompt it reads first (a
  gapped run of shifted reuse, below), moved to their new positions and waiting to be handed to
  the request's sequence when its cells reach them.

Each tree leaf is owned by one sequence whose cells cover the whole path to it, so any leaf
below a matched node can lend the match with ``seq_cp``. A sequence that computed cells the tree
already has (two requests prefilled the same text at once) drops its copies and takes the
tree's instead (``seq_rm`` + ``seq_cp``) when it registers, so every cached position is counted
once and ``used_cells`` is exact. Models whose cache cannot be partially removed (recurrent,
hybrid) run with the prefix cache disabled: every request recomputes its prompt.

In the deterministic mode (``reorder_when_idle``, the batch_invariant load option) cells a
sequence gives up are *parked* on a reserved sequence id instead of freed, until llama.cpp runs
out of room: freed cells below a sequence's own would let its next cells land out of position
order, which changes the attention kernel's summation order. The default mode frees them at once.

Two tiers (default mode, with a :class:`~.host_cache.HostCache`): every cell in the context costs
every decode step (host_cache.py says why), so while requests run the tree keeps at most
:data:`RESIDENT_IDLE_CELLS` cells that no running request uses (:meth:`trim_idle`), and an evicted
leaf's KV moves to host RAM instead of being forgotten. :meth:`acquire` brings back the segments
that extend a prompt's cached prefix before it matches, unless the last of them is so short that
recomputing it costs the step less than putting it back (:meth:`_worth_restoring`). A move is
made of copies that each scan every cell, so :meth:`stage_idle` makes them while the engine
waits, for the paths requests left behind; the move that follows only frees cells. The
deterministic mode keeps one tier: a restored segment's cells could land out of position order.

:meth:`export_order`, :meth:`export_segment` and :meth:`adopt` save the tree to disk and put it
back (``prefix_store.py``), between loads of the model.

Shifted reuse (``acquire(reuse=N)``, llama-server's ``--cache-reuse N``): past the prompt's cached
prefix, the most recently used cached paths below it (a few, in the context or in host RAM, whence the
one that gives most comes back) are scanned as llama-server scans its slot's cache, and each run of at
least N tokens one shares with the prompt's continuation is reused at the prompt's positions instead of
being read again: an editor's prompt whose first kept line moved, a prompt with a block cut out. Past
the runs that follow the prefix, new text may stand where the cached prompt had other text (a new
session's first words before an agent's unchanged system message, a summary in place of old turns):
up to :data:`MAX_GAPPED` runs after it are found too (:func:`gapped_runs`, which llama-server does not
do). llama.cpp takes a sequence's tokens only after the last position it holds, so each such run waits
in a spare sequence id (``SeqLease.gapped``) until the request has read the new text before it, and
:meth:`join` hands it over. The
cells are the tree's, so they are copied (through a spare sequence id, as a host segment comes back)
and only the copy is shifted (``llama_memory_seq_add``; llama.cpp rotates its keys at the next decode);
they become the request's private cells, and the tree is untouched. Reused keys attended to the tokens
before them where they were computed, so the result is close to, not equal to, reading the prompt
again: llama-server's trade, taken only when a request asks for it. llama.cpp rotates the keys of every
cell in the context at the next decode, so a reuse costs about what that rotation costs at this pool size
(the starter: ~1 s at 65,536 cells on 2 vCPUs, less than reading 256 tokens there; BENCHMARKS.md). Not for
models whose cache cannot shift (llama_memory_can_shift: recurrent, M-RoPE), sliding windows (the guard) or
the deterministic mode.

Sliding-window models (``guard``): llama.cpp treats a cell held by one sequence as free once it
falls out of that sequence's attention window, even with a full-size window cache, and may write
a new token over it; a cached prefix then silently loses cells (an idle holder's early positions
are out of its window). So every cell that may be cached also carries a *guard* sequence id
(:meth:`guard`: prompt chunks at once, generated tokens every :data:`GUARD_STRIDE` positions, well
inside any window), which makes it count as shared. Removing cells leaves them guarded until
:meth:`reguard` recomputes the guard from the live sequences (at most once a step, before room is
counted). Draft cells sit above ``n_past`` until confirmed, so they are never guarded before
:meth:`drop_tail` drops the rejected ones.

Owned by the engine thread; nothing here is thread-safe.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import llama_cpp as lc

from .host_cache import HostCache, Segment
from .radix import RadixCache, RadixNode, common_prefix_len
from .seqstate import StateSizes, load_state, state_of
from .standins import image_start

log = logging.getLogger(__name__)

# Idle cached cells the context keeps while requests decode. None: an idle cell costs every
# decode and prefill step about 0.25 ms per 1,000 cells (Qwen2.5-Coder 0.5B, 2 EPYC cores), while
# moving it to host RAM costs ~7 us per token once and bringing it back ~1 us (BENCHMARKS.md).
# A prefix in use is locked and stays; an idle engine trims nothing, so a chat's next turn that
# arrives before any other request finds its conversation still resident.
RESIDENT_IDLE_CELLS = 0
# Idle nodes up to this many tokens are copied to host RAM while the engine waits (KVCache.stage_idle), at
# most this many tokens of each released path: a copy costs ~0.35 ms a node at a 64k-cell context plus
# ~7 us a token, and a request arriving meanwhile waits for the node being copied (~15 ms at most here).
STAGE_MAX = 2048
GUARD_STRIDE = 64  # generated positions between two guard copies (sliding windows are 512 and more)
# A host segment that brings back fewer tokens than this may be left for the prompt step to recompute,
# when that is cheaper (KVCache._worth_restoring); longer ones always come back.
SHORT_RESTORE = 16
RESTORE_ALPHA = 0.2  # weight of the newest sample in the mean time a short restore takes
REUSE_SCAN_LIMIT = 1 << 20  # token comparisons one shifted-reuse scan may make (~0.1 s of Python)
# Cached paths a shifted reuse compares (the most recent below each of this many most recent branches
# past the prefix): llama.vim's warm-up requests cache other prompts between an editor's two completions
REUSE_CANDIDATES = 4
# Gapped runs (gapped_runs): the index keys on this many tokens and keeps this many starts of each; each
# run past a gap waits in a spare sequence id of its own until the prompt reaches it, so a request takes
# at most MAX_GAPPED of them
GAP_KGRAM = 16
GAP_CANDIDATES = 8
MAX_GAPPED = 4


@dataclass(frozen=True, slots=True)
class GappedRun:
    """Cached cells for prompt positions ``[start, end)``, past prompt tokens the request reads first:
    shifted into place already, they wait in sequence id ``holder`` (llama.cpp takes a sequence's
    tokens only in position order) until the request's own cells reach ``start`` (:meth:`KVCache.join`)."""

    start: int
    end: int
    holder: int


@dataclass(slots=True)
class SeqLease:
    """An active sequence's hold on the cache: its id, shared prefix length and locked node."""

    seq_id: int
    cached: int                      # prompt tokens reused at admission, from position 0 on
    shared_len: int                  # positions [0, shared_len) are tree cells
    node: RadixNode | None = None    # locked; ends at shared_len
    guarded: int = 0                 # positions [0, guarded) carry the guard id (sliding-window models)
    gapped: list[GappedRun] = field(default_factory=list)  # not joined yet, in prompt order
    gapped_cached: int = 0           # prompt tokens reused at admission past a gap (joined or not)

    @property
    def held(self) -> int:
        """Cells the gapped runs not joined yet hold."""
        return sum(g.end - g.start for g in self.gapped)


@dataclass(eq=False, slots=True)
class _Staged:
    """A copy of ``node``'s own KV (positions ``[start, end)``) made while the engine was idle."""

    node: RadixNode
    start: int
    end: int
    state: bytearray

    def valid(self) -> bool:
        """Whether the node still covers exactly those positions (a split moves its start)."""
        return (self.node.start, self.node.end) == (self.start, self.end)


def shifted_runs(cached: list[int], prompt: list[int], start: int, min_run: int) -> list[tuple[int, int, int]]:
    """llama-server's scan for --cache-reuse: from ``start`` in both, each run of at least ``min_run``
    tokens where ``cached`` (further along) says what ``prompt`` says next, as (position in ``cached``,
    position in ``prompt``, length); the prompt's runs follow each other from ``start``. Token
    comparisons are bounded by :data:`REUSE_SCAN_LIMIT` (a prompt of one repeated token)."""
    runs: list[tuple[int, int, int]] = []
    head_c = head_p = start
    budget = REUSE_SCAN_LIMIT
    while head_c < len(cached) and head_p < len(prompt) and budget > 0:
        if cached[head_c] != prompt[head_p]:
            head_c += 1
            budget -= 1
            continue
        n = 1
        while n < min_run and head_c + n < len(cached) and head_p + n < len(prompt) \
                and cached[head_c + n] == prompt[head_p + n]:
            n += 1
        budget -= n
        if n < min_run:
            head_c += 1
            continue
        n += common_prefix_len(cached[head_c + n:], prompt[head_p + n:])
        runs.append((head_c, head_p, n))
        head_c, head_p = head_c + n, head_p + n
    return runs


def prompt_grams(prompt: list[int], start: int, min_run: int) -> dict[tuple[int, ...], int]:
    """Each k-gram of ``prompt`` from ``start`` on (k as :func:`gapped_runs` takes it), with the last
    position it starts at: made once per request, it lets :func:`gapped_runs` skip a cached path that
    shares no run with the prompt without indexing the path."""
    k = min(min_run, GAP_KGRAM)
    return {tuple(prompt[i:i + k]): i for i in range(start, len(prompt) - k + 1)}


def gapped_runs(cached: list[int], prompt: list[int], p: int, c: int, min_run: int,
                grams: dict[tuple[int, ...], int] | None = None) -> list[tuple[int, int, int]]:
    """What :func:`shifted_runs` cannot take: runs of at least ``min_run`` tokens that ``cached`` holds
    from ``c`` on and ``prompt`` says after new text, from ``p`` on (text put in place of a cut: a new
    session's first words before an agent's unchanged system message, a summary before the kept
    turns), as (position in ``cached``, position in ``prompt``, length), each further along both than
    the last. The prompt tokens between two runs are read; a run is the longest that starts at the
    first prompt position where one starts (a k-gram index of ``cached``: linear, not a scan per
    position). Comparisons are bounded by :data:`REUSE_SCAN_LIMIT`. With ``grams`` (:func:`prompt_grams`
    of this prompt), a path with no run is ruled out first from every ``min_run - k + 1``-th of its
    k-grams (a run that long holds one whole), the common case: a few lookups instead of an index."""
    k = min(min_run, GAP_KGRAM)
    if min_run < 1 or len(prompt) - p < min_run or len(cached) - c < min_run:
        return []
    if grams is not None:
        stride = min_run - k + 1
        first = -(-c // stride) * stride
        if not any(grams.get(tuple(cached[i:i + k]), -1) >= p for i in range(first, len(cached) - k + 1, stride)):
            return []
    index: dict[tuple[int, ...], list[int]] = {}
    for i in range(c, len(cached) - k + 1):
        starts = index.setdefault(tuple(cached[i:i + k]), [])
        if len(starts) < GAP_CANDIDATES:
            starts.append(i)
    runs: list[tuple[int, int, int]] = []
    budget = REUSE_SCAN_LIMIT
    while p + min_run <= len(prompt) and budget > 0:
        best_c, best_n = -1, 0
        for i in index.get(tuple(prompt[p:p + k]), ()):
            if i < c:
                continue
            n = k + _agree(cached, i + k, prompt, p + k)
            budget -= n
            if n > best_n:
                best_c, best_n = i, n
        if best_n >= min_run:
            runs.append((best_c, p, best_n))
            p, c = p + best_n, best_c + best_n
        else:
            p += 1
            budget -= 1
    return runs


def _agree(a: list[int], i: int, b: list[int], j: int) -> int:
    """How many tokens ``a`` from ``i`` and ``b`` from ``j`` agree on, in time that follows the answer
    (windows that double while they agree, then :func:`common_prefix_len` inside the last one)."""
    n, step = 0, 16
    limit = min(len(a) - i, len(b) - j)
    while n < limit:
        w = min(step, limit - n)
        if a[i + n:i + n + w] != b[j + n:j + n + w]:
            return n + common_prefix_len(a[i + n:i + n + w], b[j + n:j + n + w])
        n += w
        step *= 2
    return n


def reusable_runs(cached: list[int], prompt: list[int], start: int, min_run: int,
                  grams: dict[tuple[int, ...], int] | None = None) -> list[tuple[int, int, int]]:
    """Every run shifted reuse takes from ``cached`` for ``prompt`` past ``start``: llama-server's
    (:func:`shifted_runs`, which follow each other from ``start``), then at most :data:`MAX_GAPPED`
    past new text (:func:`gapped_runs`, ``grams`` passed on)."""
    runs = shifted_runs(cached, prompt, start, min_run)
    p, c = (runs[-1][1] + runs[-1][2], runs[-1][0] + runs[-1][2]) if runs else (start, start)
    return runs + gapped_runs(cached, prompt, p, c, min_run, grams)[:MAX_GAPPED]


class KVCache:
    def __init__(self, mem: lc.llama_memory_t, n_cells: int, n_seq_max: int, enabled: bool,
                 *, reorder_when_idle: bool = False, ctx: lc.llama_context_p | None = None,
                 host: HostCache | None = None, guard: bool = False, slots: int = 1) -> None:
        """``ctx`` and ``host`` together turn on the host-RAM tier (not in the deterministic mode);
        ``guard`` (sliding-window models) keeps cached cells from being written over (module docstring).
        ``slots``: how many requests may be active at once (bounds the ids gapped runs may hold)."""
        self.mem = mem
        self.ctx = ctx
        self.host = host if ctx is not None and enabled and not reorder_when_idle else None
        self.resident_idle = RESIDENT_IDLE_CELLS  # trim_idle's limit
        self._staging: deque[RadixNode] = deque(maxlen=64)  # leaves of released paths, newest last (stage_idle)
        self._staged: dict[int, _Staged] = {}  # id(node) -> its idle-time copy (stage_idle)
        self._staged_bytes = 0
        self._cuts: dict[int, int] = {}  # owner -> position its cells go from, once an eviction ends (_evict_tree)
        self.n_cells = n_cells
        self.enabled = enabled
        self.tree = RadixCache()
        self.parked_id = n_seq_max - 1  # holds parked cells (see the module docstring)
        self.guard_id = n_seq_max - 2 if guard and enabled else None  # marks cells as shared (module docstring)
        self._guard_stale = False       # cells were removed since the last reguard
        self._parked = False
        # Once parked cells go back to llama.cpp, free cells can sit below used ones, and a new
        # sequence's cells can land out of position order (which changes attention's summation
        # order). With reorder_when_idle the next admission into an idle engine starts from an
        # empty cache instead (reset_if_fragmented): cached prefixes are recomputed, in order.
        self.reorder_when_idle = reorder_when_idle
        self._state_sizes = StateSizes()  # a move's buffer without asking llama.cpp to scan for its size
        self._short_restore: float | None = None  # seconds a restore under SHORT_RESTORE tokens takes, lately
        self.fragmented = False
        self.resets = 0
        self._free = self._all_ids()
        self._owned: dict[int, RadixNode] = {}
        self._active: set[int] = set()
        self._holding: set[int] = set()  # spare ids of gapped runs not joined yet (GappedRun.holder)
        # Every admission needs an id that is free or an idle holder's (evictable): with all slots
        # active, each locking one holder's path, that leaves this many ids for gapped runs.
        self._holding_cap = max(0, len(self._free) - 2 * slots)
        self.can_shift = (enabled and not reorder_when_idle and self.guard_id is None and ctx is not None
                          and bool(lc.llama_memory_can_shift(mem)))
        self.shifted_tokens = 0  # prompt tokens reused with their positions shifted (acquire's ``reuse``)

    # -- sequences ---------------------------------------------------------------------
    def acquire(self, prompt: list[int], token_seconds: Callable[[int], float | None] | None = None, *,
                reuse: int = 0) -> SeqLease:
        """Take a sequence id for a new request and give it the longest cached prefix of
        ``prompt`` (never the whole prompt: its last token must be decoded for fresh logits).
        ``token_seconds(rows)``: what one more token costs a prompt step of ``rows`` rows
        (StepCost.prompt_token_seconds), which decides whether a short host segment is worth
        bringing back (None: it always is). ``reuse`` > 0: then runs of at least that many cached
        tokens further along, shifted into place (module docstring): those that follow the prefix
        counted in ``cached``, those past a part of the prompt to read in ``gapped``, which the
        caller joins as its cells reach each (:meth:`join`)."""
        seq = self._take_id()
        self._active.add(seq)
        if not self.enabled or len(prompt) < 2:
            return SeqLease(seq, 0, 0)
        if self.host is not None and len(self.host):
            self._restore_from_host(prompt[:-1], token_seconds)
        match = self.tree.match_prefix(prompt[:-1])
        lease = SeqLease(seq, 0, 0)
        if match.length:
            owner = self.tree.path_owner(match.node)
            assert owner is not None and owner != seq
            lc.llama_memory_seq_cp(self.mem, owner, seq, 0, match.length)
            if not self._holds(seq, prompt, match.length):  # llama.cpp lost cells the tree lends: recompute, never fail
                self._give_up(seq, -1, -1)
                self._disable(f"sequence {owner} no longer holds the {match.length} cached positions it owns")
                return lease
            self.tree.lock(match.node)
            lease = SeqLease(seq, match.length, match.length, match.node, guarded=match.length)
        if reuse > 0 and self.can_shift:
            reused, gapped = self._reuse_shifted(seq, prompt[:-1], match.node, match.length, reuse)
            if reused and not self._holds(seq, prompt, match.length + reused):  # never decode over a hole
                log.warning("prefix cache: %d tokens reused shifted did not land in place; read again", reused)
                self._give_up(seq, match.length, -1)
                reused = 0
            lease.cached += reused
            for g in gapped:
                if self._holds_exactly(g.holder, g.start, g.end):
                    lease.gapped.append(g)
                    lease.gapped_cached += g.end - g.start
                else:
                    log.warning("prefix cache: %d tokens reused shifted did not land in place; read again",
                                g.end - g.start)
                    self._drop_holder(g.holder)
        return lease

    def join(self, lease: SeqLease, n_past: int) -> int:
        """Hand ``lease``'s gapped runs that start at ``n_past`` (its sequence holds ``[0, n_past)``) to
        its sequence; returns the positions it holds from 0 on after that."""
        while lease.gapped and lease.gapped[0].start == n_past:
            g = lease.gapped.pop(0)
            lc.llama_memory_seq_cp(self.mem, g.holder, lease.seq_id, g.start, g.end)
            self._drop_holder(g.holder)
            n_past = g.end
        return n_past

    def _reuse_shifted(self, seq: int, prompt: list[int], below: RadixNode, start: int,
                       min_run: int) -> tuple[int, list[GappedRun]]:
        """Give ``seq`` (holding ``prompt[:start]``) the cells of ``prompt[start:start + n]`` from a
        cached path below ``below`` (of the most recent few, the one that gives most), in runs of at
        least ``min_run`` tokens, shifted to their positions in ``prompt``, and the runs past a part of
        the prompt it must read first in spare ids of their own; returns n and those (module
        docstring, "Shifted reuse")."""
        if any(t < 0 for t in prompt[start:]):
            return 0, []
        grams = prompt_grams(prompt, start, min_run)  # once for every path compared
        best: tuple[int, RadixNode, list[tuple[int, int, int]]] | None = None
        for child in sorted(below.children.values(), key=lambda n: n.last_access)[-REUSE_CANDIDATES:]:
            leaf = child
            while leaf.children:
                leaf = max(leaf.children.values(), key=lambda n: n.last_access)
            runs = reusable_runs(leaf.path(), prompt, start, min_run, grams)
            length = sum(n for _, _, n in runs)
            if leaf.owner is not None and length and (best is None or length > best[0]):
                best = (length, leaf, runs)
        if best is not None:
            self.tree.lock(best[1])  # room made for a host segment must not come from it
        try:
            back = self._host_reuse(prompt, start, min_run, best[0] if best is not None else 0, grams)
        finally:
            if best is not None:
                self.tree.unlock(best[1])
        if back is not None:
            best = back
        if best is None:
            return 0, []
        _, node, runs = best
        owner = self.tree.path_owner(node)
        assert owner is not None
        reused, gapped = 0, list[GappedRun]()
        self.tree.lock(node)  # a spare id taken by eviction must not be the one it copies from
        try:
            for c0, p0, n in runs:
                contiguous = p0 == start + reused and not gapped
                if not contiguous and len(self._holding) >= self._holding_cap:
                    break  # read, not held: the ids are kept for admissions (_holding_cap)
                holder = self._shifted_copy(owner, c0, p0, n)
                if holder is None:
                    break
                if contiguous:  # follows what seq holds: its own at once
                    lc.llama_memory_seq_cp(self.mem, holder, seq, p0, p0 + n)
                    self._drop(holder)
                    reused += n
                else:
                    gapped.append(GappedRun(p0, p0 + n, holder))
                    self._holding.add(holder)
                self.shifted_tokens += n
        finally:
            self.tree.unlock(node)
        return reused, gapped

    def _host_reuse(self, prompt: list[int], start: int, min_run: int, beat: int,
                    grams: dict[tuple[int, ...], int]) -> tuple[int, RadixNode, list[tuple[int, int, int]]] | None:
        """A path in host RAM that gives shifted reuse more than ``beat`` tokens, brought back into the
        tree (with the segments before it, as :meth:`_restore_from_host` brings back a prompt's):
        its tokens, its node and runs; None when none does, or it could not come back. A path that
        left the context while other requests ran (llama.vim's warm-up requests between two
        completions) is as good a source as one still there."""
        if self.host is None or self.ctx is None:
            return None
        found: tuple[int, list[int], list[tuple[int, int, int]]] | None = None
        looked = 0
        for seg in self.host.segments():  # most recent first
            if seg.end <= start or seg.path[:start] != prompt[:start]:
                continue
            runs = reusable_runs(seg.path, prompt, start, min_run, grams)
            length = sum(n for _, _, n in runs)
            if length > max(beat, found[0] if found is not None else 0):
                found = (length, seg.path, runs)
            looked += 1
            if looked == 4 * REUSE_CANDIDATES:  # a path evicted node by node is several segments
                break
        if found is None:
            return None
        length, path, runs = found
        self._restore_from_host(path, None)
        match = self.tree.match_prefix(path)
        if match.length < runs[-1][0] + runs[-1][2] or self.tree.path_owner(match.node) is None:
            return None
        return length, match.node, runs

    def _shifted_copy(self, owner: int, c0: int, p0: int, n: int) -> int | None:
        """A spare id holding a copy of ``owner``'s cells at positions ``[c0, c0 + n)`` moved to
        ``[p0, p0 + n)``: serialised, loaded into the spare id (cells of its own) and shifted there;
        the caller hands them on and drops it. None (nothing changed) when no id or no room is free."""
        assert self.ctx is not None
        try:
            spare = self._take_id()
        except RuntimeError:
            return None
        if not load_state(self.ctx, spare, self._range_state(self.ctx, owner, c0, c0 + n)):
            log.debug("prefix cache: no room to reuse %d cached tokens shifted", n)
            self._drop(spare)
            return None
        lc.llama_memory_seq_add(self.mem, spare, c0, c0 + n, p0 - c0)
        return spare

    def register(self, lease: SeqLease, tokens: list[int]) -> None:
        """Make the KV of ``tokens`` (positions 0..len-1, computed by this active sequence)
        part of the shared cache, so other requests can reuse it."""
        if not self.enabled or len(tokens) <= lease.shared_len:
            return
        seq = lease.seq_id
        match = self.tree.match_prefix(tokens)
        if match.length > lease.shared_len:  # our own cells duplicate cached ones: use theirs
            other = self.tree.path_owner(match.node)
            assert other is not None and other != seq
            if not self._give_up(seq, lease.shared_len, match.length):
                self._disable("partial removal refused")
                return
            lc.llama_memory_seq_cp(self.mem, other, seq, lease.shared_len, match.length)
        node = match.node
        if match.length < len(tokens):
            result = self.tree.insert(tokens, seq)
            node = result.node
            displaced = result.displaced_owner
            if displaced is not None:
                self._owned.pop(displaced, None)
                if displaced != seq and displaced not in self._active:
                    self._drop(displaced)  # an idle holder whose path we now cover
            self._owned[seq] = node
        self.tree.lock(node)
        if lease.node is not None:
            self.tree.unlock(lease.node)
        lease.node, lease.shared_len = node, len(tokens)

    def release(self, lease: SeqLease, tokens: list[int], keep: bool) -> None:
        """A request ended; with ``keep`` its KV (``tokens`` = those with KV) stays as cache."""
        seq = lease.seq_id
        for g in lease.gapped:  # never reached: their cells go with their spare ids
            self._drop_holder(g.holder)
        lease.gapped.clear()
        if keep:
            self.guard(lease, len(tokens), now=True)
            self.register(lease, tokens)
        if lease.node is not None:
            self.tree.unlock(lease.node)
            lease.node = None
        self._active.discard(seq)
        node = self._owned.get(seq) if self.enabled else None
        if node is not None:  # idle holder: keep exactly the path to its leaf
            if not self._give_up(seq, node.end, -1):
                self._disable("partial removal refused")
            elif self.host is not None:
                self._staging.append(node)
        else:
            self._drop(seq)

    def staging_pending(self) -> bool:
        """Whether :meth:`stage_idle` has released paths to look at."""
        return bool(self._staging)

    def stage_idle(self, interrupted: Callable[[], bool]) -> None:
        """The engine has nothing to run: copy the KV of recently released paths, node by node, while
        their cells stay where they are, until ``interrupted()`` (a request came). When such a node is
        later moved to host RAM (:meth:`trim_idle`, :meth:`evict`), the copy goes there and only its
        cells are freed: the copy (each scans every cell, ~0.35 ms a node at a 64k-cell context) is off
        the next request's first token. What the host tier holds, and when, is what it was without this.
        Nodes in use, over :data:`STAGE_MAX` tokens or copied already are skipped; a path's walk stops
        at the first such node. The copies count against the host tier's bytes: none is made when it is
        full, and the oldest give way to what is moved there."""
        if self.host is None or self.ctx is None or not self.enabled:
            self._staging.clear()
            return
        for key in [k for k, copy in self._staged.items() if not (copy.valid() and self._attached(copy.node))]:
            self._unstage(key)
        while self._staging and not interrupted():
            node: RadixNode | None = self._staging.pop()
            budget = STAGE_MAX
            while node is not None and node.parent is not None and self._attached(node) and node.lock_ref == 0 \
                    and len(node.key) <= budget:
                if not self._is_staged(node):
                    if self.host.n_bytes + self._staged_bytes >= self.host.max_bytes:
                        return  # no room: the copies live inside the host tier's budget
                    state = self.export_segment(self.ctx, node)
                    if state is None:
                        break
                    if self.host.n_bytes + self._staged_bytes + len(state) > self.host.max_bytes:
                        return  # no room for this one
                    self._staged[id(node)] = _Staged(node, node.start, node.end, state)
                    self._staged_bytes += len(state)
                budget -= len(node.key)
                node = node.parent
                if interrupted():
                    break

    def _is_staged(self, node: RadixNode) -> bool:
        copy = self._staged.get(id(node))
        return copy is not None and copy.node is node and copy.valid()

    def _unstage(self, key: int) -> _Staged:
        copy = self._staged.pop(key)
        self._staged_bytes -= len(copy.state)
        return copy

    def _forget_staged(self) -> None:
        self._staging.clear()
        self._staged.clear()
        self._staged_bytes = 0

    def _attached(self, node: RadixNode) -> bool:
        """Whether ``node`` is still in this cache's tree (not evicted, not from a tree since replaced)."""
        while node.parent is not None:
            if node.parent.children.get(node.key[0]) is not node:
                return False
            node = node.parent
        return node is self.tree.root

    # -- on disk (prefix_store.py; engine thread, while nothing runs) ----------------------
    def export_order(self, max_tokens: int) -> list[tuple[RadixNode, RadixNode | None]]:
        """Cached nodes with their parents (None: the root), parents first, most recently used
        subtrees first, up to ``max_tokens`` positions in all."""
        out: list[tuple[RadixNode, RadixNode | None]] = []
        total = 0
        stack: list[RadixNode] = sorted(self.tree.root.children.values(), key=lambda n: n.last_access)
        while stack:
            node = stack.pop()
            if total + len(node.key) > max_tokens:
                continue
            total += len(node.key)
            out.append((node, node.parent if node.parent is not self.tree.root else None))
            stack.extend(sorted(node.children.values(), key=lambda n: n.last_access))
        return out

    def export_segment(self, ctx: lc.llama_context_p, node: RadixNode) -> bytearray | None:
        """The KV of ``node``'s own positions ``[start, end)`` as llama.cpp serialises a sequence
        (copied to the parked id for the call, so nothing cached moves)."""
        owner = self.tree.path_owner(node)
        if owner is None:
            return None
        self.release_parked()
        return self._range_state(ctx, owner, node.start, node.end)

    def _range_state(self, ctx: lc.llama_context_p, owner: int, start: int, end: int) -> bytearray:
        """``owner``'s KV of positions ``[start, end)``, serialised through the parked id (nothing moves)."""
        lc.llama_memory_seq_cp(self.mem, owner, self.parked_id, start, end)
        try:
            return state_of(ctx, self.parked_id, end - start, self._state_sizes)
        finally:
            lc.llama_memory_seq_rm(self.mem, self.parked_id, -1, -1)

    def adopt(self, ctx: lc.llama_context_p, tokens: list[int], start: int, state: bytes | bytearray) -> bool:
        """Put saved KV back: ``state`` holds positions ``[start, len(tokens))`` and the tree
        already caches ``tokens[:start]``. Positions the tree caches beyond ``start`` are taken
        from the tree, not from ``state`` (each position is cached once). False (nothing changed)
        when llama.cpp refuses it or no room can be made."""
        if not self.enabled or self.tree.match_prefix(tokens[:start]).length != start:
            return False
        try:
            seq = self._take_id()
        except RuntimeError:
            return False
        loaded = load_state(ctx, seq, state)
        if not loaded and self.evict(len(tokens) - start):  # no room: make some, once
            loaded = load_state(ctx, seq, state)
        full = self.tree.match_prefix(tokens)
        if not loaded or full.length < start:  # refused, or the eviction took the prefix it continues
            self._drop(seq)
            return False
        if full.length == len(tokens):  # cached meanwhile
            self._drop(seq)
            return True
        if full.length > start and not lc.llama_memory_seq_rm(self.mem, seq, start, full.length):
            self._drop(seq)
            return False
        if full.length:
            holder = self.tree.path_owner(full.node)
            assert holder is not None and holder != seq
            lc.llama_memory_seq_cp(self.mem, holder, seq, 0, full.length)
        if not self._holds(seq, tokens, len(tokens)):  # a saved state with holes (written before the guard)
            log.warning("prefix cache: a saved segment of %d tokens is incomplete; dropped", len(tokens) - start)
            self._drop(seq)
            return False
        if self.guard_id is not None:  # the loaded cells are cached from now on
            lc.llama_memory_seq_cp(self.mem, seq, self.guard_id, start, len(tokens))
        result = self.tree.insert(tokens, seq)
        assert result.created
        if result.displaced_owner is not None:  # the parent's holder: ``seq`` now covers its path
            self._owned.pop(result.displaced_owner, None)
            if result.displaced_owner not in self._active:
                self._drop(result.displaced_owner)
        self._owned[seq] = result.node
        return True

    # -- host RAM (host_cache.py) -----------------------------------------------------------
    def trim_idle(self) -> int:
        """Move least recently used idle cached cells to host RAM until at most ``resident_idle``
        remain in the context; returns the cells moved. Nothing without a host tier."""
        if self.host is None or not self.enabled:
            return 0
        excess = self.tree.evictable_size - self.resident_idle
        return self.evict(excess) if excess > 0 else 0

    def resident_budget(self) -> int:
        """Cached cells worth restoring into the context from disk: what :meth:`trim_idle` keeps
        with a host tier, half the context without one."""
        return self.resident_idle if self.host is not None else self.n_cells // 2

    def host_segments(self) -> list[Segment]:
        return self.host.segments() if self.host is not None else []

    def keep_in_host(self, tokens: list[int], start: int, state: bytearray) -> bool:
        """Store saved KV of positions ``[start, len(tokens))`` in host RAM (prefix_store's replay,
        beyond what the context keeps); False without a host tier or room."""
        return self.host is not None and self.host.put(tokens, start, state)

    def _restore_from_host(self, prompt: list[int], token_seconds: Callable[[int], float | None] | None) -> None:
        """Bring back the host segments that extend the cached prefix of ``prompt``, one by one."""
        assert self.host is not None and self.ctx is not None
        while True:
            match = self.tree.match_prefix(prompt)
            seg = self.host.best(prompt, match.length)
            if seg is None:
                return
            reach = seg.start + common_prefix_len(seg.path, prompt, seg.start)  # what it brings this prompt
            rows = len(prompt) + 1 - match.length  # the step this request's prompt makes without it
            per_token = token_seconds(rows) if token_seconds is not None else None
            if not self._worth_restoring(prompt, reach - match.length, reach, per_token):
                self.host.put(seg.path, seg.start, seg.state)  # kept for a prompt it brings more
                self.host.skipped_tokens += reach - match.length
                return
            self.tree.lock(match.node)  # room for the segment must not come from the prefix it continues
            try:
                # the idle prefixes this request's step would move out anyway go first, so the segment
                # lands in the lowest free cells: llama.cpp attends every cell up to the highest in use,
                # and a segment restored above a 20k idle prefix kept each step over the gap (+8 % a token)
                self.trim_idle()
                started = time.perf_counter()
                restored = self.adopt(self.ctx, seg.path, seg.start, seg.state)
                if restored and seg.end - seg.start < SHORT_RESTORE:
                    took = time.perf_counter() - started
                    last = self._short_restore
                    self._short_restore = took if last is None else last + RESTORE_ALPHA * (took - last)
            finally:
                self.tree.unlock(match.node)
            if not restored:
                log.debug("prefix cache: a host segment of %d tokens could not go back", seg.end - seg.start)
                self.host.put(seg.path, seg.start, seg.state)
                return
            self.host.restored_tokens += seg.end - seg.start

    def _worth_restoring(self, prompt: list[int], tokens: int, reach: int, token_seconds: float | None) -> bool:
        """Whether bringing back a segment that gives ``prompt`` ``tokens`` more cached tokens (up
        to ``reach``) saves the prompt step more than it costs.

        A restore costs a few scans of every cell whatever its length (0.5-1 ms at 65,536 cells on
        a 2-vCPU EPYC), where recomputing a token costs a tiny model's step 0.05 ms and a 0.5B
        model's 3: on a small or fast model, a segment of one or two tokens (the words that prompts
        sharing a template also share) is cheaper to recompute. Only the last link of a chain is
        left: one that others continue opens the way to all of them. Unknown costs restore.
        """
        if token_seconds is None or self._short_restore is None or tokens >= SHORT_RESTORE:
            return True
        if tokens * token_seconds >= self._short_restore:
            return True
        assert self.host is not None
        return self.host.best(prompt, reach, take=False) is not None  # a chain: the next link needs this one

    def _offload(self, owner: int, leaf: RadixNode) -> None:
        """Keep the KV of an evicted ``leaf`` (held by ``owner``) in host RAM."""
        assert self.host is not None and self.ctx is not None
        path = leaf.path()
        if self._is_staged(leaf):  # copied while the engine was idle (stage_idle)
            state = self._unstage(id(leaf)).state
        else:
            state = self._range_state(self.ctx, owner, leaf.start, leaf.end)
        while self._staged and self.host.n_bytes + self._staged_bytes + len(state) > self.host.max_bytes:
            self._unstage(next(iter(self._staged)))  # the copies give way to what is moved: oldest first
        self.host.put(path, leaf.start, state)

    # -- memory ------------------------------------------------------------------------
    @property
    def cached_cells(self) -> int:
        return self.tree.total_size

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` cached cells if possible (LRU leaves first)."""
        if not self.enabled or num_tokens <= 0:
            return 0
        freed = self._evict_tree(num_tokens)
        if freed:
            log.debug("prefix cache: evicted %d tokens", freed)
        return freed

    def evict_all(self) -> int:
        return self.evict(self.tree.evictable_size)

    @property
    def scratch_id(self) -> int:
        """A sequence id for a cell that lives one step (the batcher's placeholder token); it is the
        parked id, unused in the default mode. Call :meth:`clear_scratch` after the decode."""
        assert not self.reorder_when_idle, "the deterministic mode parks cells on this id"
        return self.parked_id

    def clear_scratch(self) -> None:
        lc.llama_memory_seq_rm(self.mem, self.parked_id, -1, -1)

    @property
    def can_draft(self) -> bool:
        """Whether a sequence's tail cells can be dropped one step after they were decoded
        (:meth:`drop_tail`): not for recurrent models, and not in the deterministic mode, where
        freed cells would let later ones land out of position order. (Drafts are never guarded:
        :meth:`guard` covers positions below ``n_past`` only, so dropping them leaves no guard behind.)"""
        return self.enabled and not self.reorder_when_idle

    def drop_tail(self, lease: SeqLease, n_past: int) -> None:
        """Forget an active sequence's cells from position ``n_past`` on: draft tokens the batcher
        decoded and sampling did not confirm (only when :attr:`can_draft`)."""
        lc.llama_memory_seq_rm(self.mem, lease.seq_id, n_past, -1)

    def release_parked(self) -> bool:
        """Free the parked cells (call when llama.cpp found no room); False if there were none."""
        if not self._parked:
            return False
        lc.llama_memory_seq_rm(self.mem, self.parked_id, -1, -1)
        self._parked = False
        self.fragmented = True
        return True

    def reset_if_fragmented(self) -> bool:
        """With ``reorder_when_idle``, and no active sequence: if parked cells were handed back
        since the last reset, drop every cached prefix and clear the memory, so cells are
        allocated in position order again. True when it reset."""
        if not (self.reorder_when_idle and self.fragmented) or self._active:
            return False
        lc.llama_memory_clear(self.mem, True)
        log.info("KV cache: cleared after it filled up, so new cells are allocated in order (%d cached tokens dropped)",
                 self.tree.total_size)
        self.tree = RadixCache()
        self._forget_staged()
        self._owned.clear()
        self._free = self._all_ids()
        self._parked = False
        self.fragmented = False
        self.resets += 1
        return True

    def _give_up(self, seq: int, p0: int, p1: int) -> bool:
        """Remove positions [p0, p1) from ``seq``, parking the cells; False when llama.cpp
        refuses a partial removal (nothing is removed then). A range the sequence holds no
        position of is left alone: each removal scans every cell of the context, and a finished
        request's release usually has nothing beyond its cached path to give up."""
        if self._holds_none(seq, p0, p1):
            return True
        if self.enabled and self.reorder_when_idle:
            lc.llama_memory_seq_cp(self.mem, seq, self.parked_id, p0, p1)
            self._parked = True
        self._guard_stale = self.guard_id is not None
        return bool(lc.llama_memory_seq_rm(self.mem, seq, p0, p1))

    def _holds_none(self, seq: int, p0: int, p1: int) -> bool:
        """Whether ``seq`` has no position in ``[p0, p1)`` (negative: open ends), from the lowest
        and highest position llama.cpp keeps for each sequence (no scan of the cells)."""
        high = int(lc.llama_memory_seq_pos_max(self.mem, seq))
        if high < 0 or high < p0:
            return True
        return 0 <= p1 <= int(lc.llama_memory_seq_pos_min(self.mem, seq))

    # -- sliding-window guard (module docstring) -----------------------------------------
    def guard(self, lease: SeqLease, n_past: int, *, now: bool = False) -> None:
        """Mark an active sequence's positions ``[lease.guarded, n_past)`` as shared: at once with
        ``now`` (a prompt chunk, a release), else once :data:`GUARD_STRIDE` of them are waiting."""
        if self.guard_id is None or n_past <= lease.guarded or (not now and n_past - lease.guarded < GUARD_STRIDE):
            return
        lc.llama_memory_seq_cp(self.mem, lease.seq_id, self.guard_id, lease.guarded, n_past)
        lease.guarded = n_past

    def reguard(self) -> None:
        """After cells were removed: the guard holds exactly the live sequences' cells again, so
        removed cells are free for llama.cpp too (one pass over the cells per live sequence)."""
        if self.guard_id is None or not self._guard_stale:
            return
        lc.llama_memory_seq_rm(self.mem, self.guard_id, -1, -1)
        for seq in self._active | set(self._owned):
            lc.llama_memory_seq_cp(self.mem, seq, self.guard_id, -1, -1)
        self._guard_stale = False

    def _holds_exactly(self, seq: int, p0: int, p1: int) -> bool:
        """Whether ``seq``'s positions run from ``p0`` to ``p1 - 1`` (a gapped run's spare id)."""
        return (int(lc.llama_memory_seq_pos_min(self.mem, seq)) == p0
                and int(lc.llama_memory_seq_pos_max(self.mem, seq)) == p1 - 1)

    def _holds(self, seq: int, path: list[int], n: int) -> bool:
        """Whether llama.cpp holds exactly the cells of ``path[:n]`` for ``seq``: positions 0 to
        ``n - 1`` (it keeps a sequence's positions contiguous, so the two ends say it), or to the
        first position of an M-RoPE image ``path[:n]`` ends with, which all its cells carry (vision.py)."""
        low = int(lc.llama_memory_seq_pos_min(self.mem, seq))
        high = int(lc.llama_memory_seq_pos_max(self.mem, seq))
        if low != 0 or n == 0:
            return low == 0 and high == n - 1
        return high == n - 1 or (path[n - 1] < 0 and high == image_start(path, n))

    def check_cells(self) -> None:
        """Assert that llama.cpp still holds every cached path: each leaf owner's positions are
        exactly ``[0, leaf.end)`` (llama.cpp keeps a sequence's positions contiguous)."""
        for leaf, owner in self.tree.leaf_owners():
            assert owner is not None
            assert self._holds(owner, leaf.path(), leaf.end), \
                f"sequence {owner} does not hold its cached path [0, {leaf.end})"

    def _on_evict(self, leaf: RadixNode, inherited: bool) -> None:
        owner = leaf.owner
        assert owner is not None and owner not in self._active, "evicted a leaf of a running sequence"
        if self.host is not None:
            self._offload(owner, leaf)
        self._owned.pop(owner, None)
        if inherited:  # the owner keeps the parent's path; its cells from the leaf on go when the eviction ends
            assert leaf.parent is not None
            self._owned[owner] = leaf.parent
            self._cuts[owner] = min(leaf.start, self._cuts.get(owner, leaf.start))
            return
        self._cuts.pop(owner, None)
        self._drop(owner)

    def _evict_tree(self, num_tokens: int) -> int:
        """The tree's LRU eviction (:meth:`_on_evict` per leaf), then one removal per owner that kept a
        shorter path: evicting a chain of nodes of one owner scans the cells once, not once a node."""
        try:
            return self.tree.evict(num_tokens, self._on_evict)
        finally:
            cuts, self._cuts = self._cuts, {}
            for owner, start in cuts.items():
                if not self._give_up(owner, start, -1):  # the parent must not point at this sequence
                    self._disable("partial removal refused")
                    break

    def _all_ids(self) -> list[int]:
        """Every sequence id but the parked and guard ones, as a free list (pop() gives the lowest id)."""
        top = self.guard_id if self.guard_id is not None else self.parked_id
        return list(range(top - 1, -1, -1))

    def _take_id(self) -> int:
        while not self._free:
            if not self.enabled or self._evict_tree(1) == 0:
                raise RuntimeError("no free sequence id (more active sequences than slots?)")
        return self._free.pop()

    def _drop(self, seq: int) -> None:
        self._give_up(seq, -1, -1)  # whole sequence: never refused
        self._owned.pop(seq, None)
        self._free.append(seq)

    def _drop_holder(self, holder: int) -> None:
        self._holding.discard(holder)
        self._drop(holder)

    def _disable(self, why: str) -> None:
        """Fall back to recomputing: forget every cached prefix (running requests keep theirs)."""
        log.warning("prefix cache disabled: %s", why)
        self.enabled = False
        for seq in list(self._owned):
            if seq not in self._active:
                self._drop(seq)
        self.release_parked()
        self._owned.clear()
        self.tree = RadixCache()
        self._forget_staged()
        if self.host is not None:
            self.host.clear()
            self.host = None

    def check_integrity(self) -> None:
        """Tree invariants plus: owners are exactly the owned sequences, none is free, and every id is
        free, active, owned or holding a gapped run."""
        self.tree.check_integrity()
        owners = {owner for _, owner in self.tree.leaf_owners()}
        assert owners == set(self._owned), f"{owners} != {set(self._owned)}"
        assert not (set(self._free) & (self._active | set(self._owned) | self._holding))
        lost = set(self._all_ids()) - set(self._free) - self._active - set(self._owned) - self._holding
        assert not lost, f"sequence ids in no state: {sorted(lost)}"
        assert self.parked_id not in set(self._free) | self._active | set(self._owned)

