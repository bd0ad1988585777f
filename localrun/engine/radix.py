"""A radix tree over token ids: which prompt prefixes have their KV in the llama context.

The contract follows SGLang's RadixCache (``mem_cache/radix_cache.py``):

- ``match_prefix(tokens)`` finds the longest cached prefix and returns the node that ends
  exactly there (a node is split when the match ends inside it). The KV behind a match is
  valid only while that node is locked.
- ``insert(tokens, owner)`` adds the tokens not yet cached as a new leaf owned by ``owner``.
- ``lock(node)`` / ``unlock(node)`` add or remove one reference on the node and every ancestor
  up to the root; locked nodes are never evicted.
- ``evict(num_tokens, on_evict)`` removes least-recently-used unlocked leaves until at least
  ``num_tokens`` tokens are gone or nothing evictable is left.
- ``check_integrity()`` asserts every invariant; tests call it after every operation.

Pure Python, no llama_cpp: the tree only knows token ids, sizes and an opaque ``owner`` per leaf
(the engine stores the llama sequence id that holds the leaf's KV; see ``kvcache.py``).
Invariants: every non-root leaf has an owner, no inner node has one, no two nodes share an owner.
Not thread-safe: the engine thread owns the tree.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class RadixNode:
    """One edge of the tree: ``key`` are the tokens at positions ``[start, end)``."""

    key: list[int]
    parent: RadixNode | None
    end: int                                  # position after the last token of ``key``
    children: dict[int, RadixNode] = field(default_factory=dict)
    lock_ref: int = 0                         # locks on this node or any descendant
    direct_locks: int = 0                     # locks placed on this very node
    last_access: int = 0                      # logical clock, larger = more recent
    owner: int | None = None                  # set on leaves only (engine: llama seq id)

    @property
    def start(self) -> int:
        return self.end - len(self.key)

    def is_leaf(self) -> bool:
        return not self.children

    def path(self) -> list[int]:
        """The tokens from the root to the end of this node (a detached node keeps its parent link)."""
        keys: list[list[int]] = []
        cur: RadixNode | None = self
        while cur is not None:
            keys.append(cur.key)
            cur = cur.parent
        return [t for key in reversed(keys) for t in key]


@dataclass(frozen=True, slots=True)
class MatchResult:
    """``node`` ends exactly at ``length`` tokens (the root when nothing matched)."""

    node: RadixNode
    length: int


@dataclass(frozen=True, slots=True)
class InsertResult:
    """``node`` ends exactly at ``len(tokens)``; ``prefix_len`` tokens were cached already.

    ``attached_to`` is the node the new leaf hangs from and ``displaced_owner`` the owner that
    node had as a leaf before it got a child (None when no new leaf was created or it had none).
    """

    node: RadixNode
    prefix_len: int
    created: bool
    displaced_owner: int | None = None


class RadixCache:
    """Token-prefix tree with lock references and LRU eviction of unlocked leaves."""

    def __init__(self) -> None:
        self.root = RadixNode(key=[], parent=None, end=0)
        self.root.lock_ref = 1  # the root is never evicted
        self._clock = itertools.count(1)
        self._total = 0
        self._protected = 0

    # -- sizes -------------------------------------------------------------------------
    @property
    def total_size(self) -> int:
        """Tokens held by the tree (each cached position once)."""
        return self._total

    @property
    def protected_size(self) -> int:
        """Tokens in locked nodes."""
        return self._protected

    @property
    def evictable_size(self) -> int:
        return self._total - self._protected

    # -- lookup ------------------------------------------------------------------------
    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        """Longest cached prefix of ``tokens``; splits a node so the result ends on a node.

        Marks every node on the path as just used.
        """
        node, length = self.root, 0
        now = next(self._clock)
        node.last_access = now
        while length < len(tokens):
            child = node.children.get(tokens[length])
            if child is None:
                break
            common = _common_len(child.key, tokens, length)
            if common < len(child.key):
                child = self._split(child, common)
            child.last_access = now
            node, length = child, length + common
            if common < len(child.key):
                break
        return MatchResult(node, length)

    def insert(self, tokens: Sequence[int], owner: int) -> InsertResult:
        """Cache ``tokens``; the part not cached yet becomes a new leaf owned by ``owner``.

        When the new leaf hangs from a former leaf, that leaf loses its owner (an inner node has
        none) and it is returned as ``displaced_owner`` so the engine can release or keep it.
        """
        match = self.match_prefix(tokens)
        node, length = match.node, match.length
        if length == len(tokens):
            return InsertResult(node, length, created=False)
        displaced = None
        if node is not self.root and node.is_leaf():
            displaced, node.owner = node.owner, None
        leaf = RadixNode(key=list(tokens[length:]), parent=node, end=len(tokens),
                         last_access=node.last_access, owner=owner)
        node.children[leaf.key[0]] = leaf
        self._total += len(leaf.key)
        return InsertResult(leaf, length, created=True, displaced_owner=displaced)

    def path_owner(self, node: RadixNode) -> int | None:
        """An owner whose KV covers the path root..node: the owner of any leaf below ``node``."""
        while node.children:
            node = next(iter(node.children.values()))
        return node.owner

    # -- locking -----------------------------------------------------------------------
    def lock(self, node: RadixNode) -> None:
        """Protect ``node`` and its ancestors from eviction (one reference)."""
        node.direct_locks += 1
        cur: RadixNode | None = node
        while cur is not None and cur is not self.root:
            if cur.lock_ref == 0:
                self._protected += len(cur.key)
            cur.lock_ref += 1
            cur = cur.parent

    def unlock(self, node: RadixNode) -> None:
        """Drop one reference taken by :meth:`lock`."""
        if node.direct_locks <= 0:
            raise ValueError("unlock of a node that is not locked")
        node.direct_locks -= 1
        cur: RadixNode | None = node
        while cur is not None and cur is not self.root:
            cur.lock_ref -= 1
            if cur.lock_ref == 0:
                self._protected -= len(cur.key)
            cur = cur.parent

    # -- eviction ----------------------------------------------------------------------
    def evict(self, num_tokens: int, on_evict: Callable[[RadixNode, bool], None]) -> int:
        """Remove LRU unlocked leaves until ``num_tokens`` tokens are freed; returns tokens freed.

        ``on_evict(leaf, inherited)`` is called after the leaf is detached (``leaf.parent`` still
        names the node it hung from). ``inherited`` says the parent became a leaf and now has the
        evicted leaf's owner (that owner's KV covers the parent's path); otherwise the owner holds
        nothing the tree needs any more and the engine can release it.
        """
        heap = [(n.last_access, id(n), n) for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            self._total -= len(leaf.key)
            freed += len(leaf.key)
            inherited = parent is not self.root and parent.is_leaf()
            if inherited:  # the leaf's owner also holds the parent's path: it now owns it
                parent.owner = leaf.owner
            on_evict(leaf, inherited)
            if inherited and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return freed

    def leaf_owners(self) -> Iterator[tuple[RadixNode, int | None]]:
        for leaf in self._leaves():
            yield leaf, leaf.owner

    # -- integrity ---------------------------------------------------------------------
    def check_integrity(self) -> None:
        """Assert every invariant (sizes, lock counts, owners, keys, positions)."""
        total = protected = 0
        owners: set[int] = set()
        stack = [self.root]
        while stack:
            node = stack.pop()
            expected_ref = node.direct_locks + sum(c.lock_ref for c in node.children.values())
            if node is not self.root:
                assert node.key, "empty key on a non-root node"
                assert node.parent is not None and node.parent.children.get(node.key[0]) is node
                assert node.end == node.parent.end + len(node.key), "positions do not add up"
                assert node.lock_ref == expected_ref, f"lock_ref {node.lock_ref} != {expected_ref}"
                total += len(node.key)
                protected += len(node.key) if node.lock_ref > 0 else 0
                if node.is_leaf():
                    assert node.owner is not None, "leaf without owner"
                else:
                    assert node.owner is None, "inner node with owner"
                if node.owner is not None:
                    assert node.owner not in owners, f"owner {node.owner} on two nodes"
                    owners.add(node.owner)
            for first, child in node.children.items():
                assert child.key[0] == first
                stack.append(child)
        assert total == self._total, f"total {self._total} != {total}"
        assert protected == self._protected, f"protected {self._protected} != {protected}"

    # -- internals ---------------------------------------------------------------------
    def _split(self, child: RadixNode, at: int) -> RadixNode:
        """Split ``child`` after ``at`` tokens; returns the new upper node (``child`` keeps its tail)."""
        parent = child.parent
        assert parent is not None and 0 < at < len(child.key)
        upper = RadixNode(key=child.key[:at], parent=parent, end=child.start + at,
                          lock_ref=child.lock_ref, last_access=child.last_access)
        parent.children[upper.key[0]] = upper
        child.key = child.key[at:]
        child.parent = upper
        upper.children[child.key[0]] = child
        return upper

    def _leaves(self) -> Iterator[RadixNode]:
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                yield node


def _common_len(key: Sequence[int], tokens: Sequence[int], offset: int) -> int:
    n = min(len(key), len(tokens) - offset)
    if list(tokens[offset:offset + n]) == list(key[:n]):
        return n
    i = 0
    while i < n and key[i] == tokens[offset + i]:
        i += 1
    return i


def common_prefix_len(a: Sequence[int], b: Sequence[int], offset: int = 0) -> int:
    """How many tokens ``a`` and ``b`` agree on from ``offset`` (list slices compare at C speed;
    a binary search over them finds the first difference)."""
    lo, hi = 0, min(len(a), len(b)) - offset
    if hi <= 0:
        return 0
    if a[offset: offset + hi] == b[offset: offset + hi]:
        return hi
    while lo < hi:  # invariant: the first lo tokens agree, the first hi + 1 do not
        mid = (lo + hi + 1) // 2
        if a[offset + lo: offset + mid] == b[offset + lo: offset + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
