"""The prefix tree against a naive oracle (a prefix-closed set of token tuples), with
``check_integrity()`` after every operation."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from localrun.engine.radix import RadixCache, RadixNode

tokens_st = st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=12)


def path_of(node: RadixNode) -> tuple[int, ...]:
    parts: list[list[int]] = []
    cur: RadixNode | None = node
    while cur is not None and cur.parent is not None:
        parts.append(cur.key)
        cur = cur.parent
    return tuple(t for key in reversed(parts) for t in key)


class RadixMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.tree = RadixCache()
        self.oracle: set[tuple[int, ...]] = set()  # every cached prefix, prefix-closed
        self.locks: list[tuple[RadixNode, tuple[int, ...]]] = []
        self.next_owner = 0
        self.released: list[int] = []

    def oracle_match(self, tokens: list[int]) -> int:
        n = 0
        while n < len(tokens) and tuple(tokens[: n + 1]) in self.oracle:
            n += 1
        return n

    @rule(tokens=tokens_st)
    def insert(self, tokens: list[int]) -> None:
        before = self.oracle_match(tokens)
        owner = self.next_owner
        self.next_owner += 1
        result = self.tree.insert(tokens, owner)
        assert result.prefix_len == before
        assert result.created == (before < len(tokens))
        assert path_of(result.node) == tuple(tokens)
        for i in range(1, len(tokens) + 1):
            self.oracle.add(tuple(tokens[:i]))

    @rule(tokens=tokens_st, lock=st.booleans())
    def match(self, tokens: list[int], lock: bool) -> None:
        result = self.tree.match_prefix(tokens)
        assert result.length == self.oracle_match(tokens)
        assert path_of(result.node) == tuple(tokens[: result.length])
        if result.length and result.node is not self.tree.root:
            owner = self.tree.path_owner(result.node)
            assert owner is not None
        if lock and result.length:
            self.tree.lock(result.node)
            self.locks.append((result.node, tuple(tokens[: result.length])))

    @precondition(lambda self: bool(self.locks))
    @rule(index=st.integers(min_value=0))
    def unlock(self, index: int) -> None:
        node, _ = self.locks.pop(index % len(self.locks))
        self.tree.unlock(node)

    @rule(num_tokens=st.integers(min_value=0, max_value=30))
    def evict(self, num_tokens: int) -> None:
        evictable = self.tree.evictable_size
        total = self.tree.total_size

        def on_evict(leaf: RadixNode, inherited: bool) -> None:
            assert leaf.lock_ref == 0 and leaf.is_leaf()
            assert leaf.parent is not None
            assert inherited == (leaf.parent is not self.tree.root and leaf.parent.is_leaf())
            full = path_of(leaf.parent) + tuple(leaf.key)
            for i in range(leaf.start + 1, leaf.end + 1):
                self.oracle.discard(full[:i])

        freed = self.tree.evict(num_tokens, on_evict)
        assert self.tree.total_size == total - freed
        assert freed >= min(num_tokens, evictable) or self.tree.evictable_size == 0
        for node, path in self.locks:  # locked prefixes survive eviction
            assert self.oracle_match(list(path)) == len(path)
            assert path_of(node) == path

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "tree"):
            return
        self.tree.check_integrity()
        assert self.tree.total_size == len(self.oracle)


TestRadixMachine = RadixMachine.TestCase
TestRadixMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_lru_evicts_oldest_unlocked_leaf_first() -> None:
    tree = RadixCache()
    tree.insert([1, 2, 3], owner=1)
    tree.insert([4, 5], owner=2)
    tree.insert([1, 2, 9], owner=3)
    tree.match_prefix([4, 5])  # [4, 5] is now the most recent
    evicted: list[int | None] = []
    tree.evict(1, lambda leaf, inherited: evicted.append(leaf.owner))
    assert evicted == [1]  # leaf [3] under [1, 2] is the oldest
    tree.check_integrity()


def test_locked_path_is_never_evicted() -> None:
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], owner=1)
    match = tree.match_prefix([1, 2, 3, 4])
    tree.lock(match.node)
    assert tree.evict(100, lambda leaf, inherited: None) == 0
    assert tree.match_prefix([1, 2, 3, 4]).length == 4
    tree.unlock(match.node)
    assert tree.evict(100, lambda leaf, inherited: None) == 4
    assert tree.total_size == 0
    tree.check_integrity()


def test_insert_below_a_leaf_displaces_its_owner() -> None:
    tree = RadixCache()
    tree.insert([1, 2], owner=7)
    result = tree.insert([1, 2, 3], owner=8)
    assert result.prefix_len == 2 and result.displaced_owner == 7
    assert tree.path_owner(tree.match_prefix([1, 2]).node) == 8
    tree.check_integrity()


def test_split_keeps_locks_and_sizes() -> None:
    tree = RadixCache()
    tree.insert([1, 2, 3, 4], owner=1)
    node = tree.match_prefix([1, 2, 3, 4]).node
    tree.lock(node)
    tree.insert([1, 2, 7], owner=2)  # splits the locked node after [1, 2]
    assert tree.protected_size == 4
    tree.check_integrity()
    tree.unlock(node)
    assert tree.protected_size == 0
    tree.check_integrity()
