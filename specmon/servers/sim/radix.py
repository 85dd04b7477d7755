"""The simulator's prefix (radix) cache, shaped like SGLang's RadixCache with page size 1.

A radix tree over token sequences: each node holds a run of tokens (a tuple) and stands for that
many KV slots of the pool. A request matches the longest cached prefix of its prompt; after its
prefill its prompt is inserted and its node locked, and when it finishes its whole sequence
(prompt and output) is inserted and the lock dropped. Unlocked nodes are "evictable": they hold
pool slots nobody is using, and the least recently used leaves go first when the pool needs
room. Tokens can be ints (input_ids), strings (the simulator's stand-in tokens for text when no
tokenizer is at hand) or pairs (EAGLE's bigram keys); only equality is used.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Optional


class Node:
    __slots__ = ("key", "children", "parent", "lock", "last_access", "serial")
    _serials = itertools.count()

    def __init__(self, key: tuple, parent: Optional["Node"], tick: int = 0):
        self.serial = next(Node._serials)
        self.key = key
        self.children: dict = {}
        self.parent = parent
        self.lock = 0            # running requests holding this node (and so its whole path)
        self.last_access = tick


def _common_len(a: tuple, b: tuple, pos: int) -> int:
    """Length of the common prefix of a and b[pos:] (slice comparisons: C speed on long runs)."""
    n = min(len(a), len(b) - pos)
    if a[:n] == b[pos:pos + n]:
        return n
    lo, hi = 0, n            # a[:lo] matches, a[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[pos + lo:pos + mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RadixCache:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.root = Node((), None)
        self.root.lock = 1       # never evicted
        self.evictable_size = 0  # tokens in unlocked nodes
        self.protected_size = 0  # tokens in nodes some running request holds
        self._tick = 0
        self._leaves: set = set()  # unlocked nodes without children: what eviction may take

    @property
    def total_size(self) -> int:
        return self.evictable_size + self.protected_size

    # -- lookups ---------------------------------------------------------------------------------
    def match(self, key: tuple) -> tuple[int, Node]:
        """The longest cached prefix of key: (its length, the node where it ends). A match that
        ends inside a node splits it there, so the returned node covers exactly that prefix.
        Refreshes the recency of every node on the path (LRU)."""
        self._tick += 1
        node, pos = self.root, 0
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                break
            child.last_access = self._tick
            k = _common_len(child.key, key, pos)
            if k < len(child.key):
                child = self._split(child, k)   # key ends or diverges inside it
            node, pos = child, pos + k
        return pos, node

    def insert(self, key: tuple) -> Node:
        """Adds key (the part not cached yet becomes a new unlocked leaf); returns its node."""
        pos, node = self.match(key)
        if pos < len(key):
            leaf = Node(key[pos:], node, self._tick)
            node.children[key[pos]] = leaf
            self._leaves.discard(node)
            self.evictable_size += len(leaf.key)
            self._leaves.add(leaf)
            node = leaf
        return node

    # -- locks -----------------------------------------------------------------------------------
    def lock(self, node: Node) -> int:
        """A running request holds node and its ancestors; returns the tokens that stopped being
        evictable."""
        delta = 0
        while node is not self.root:
            if node.lock == 0:
                n = len(node.key)
                self.evictable_size -= n
                self.protected_size += n
                delta += n
                self._leaves.discard(node)
            node.lock += 1
            node = node.parent
        return delta

    def unlock(self, node: Node) -> None:
        while node is not self.root:
            node.lock -= 1
            if node.lock == 0:
                n = len(node.key)
                self.evictable_size += n
                self.protected_size -= n
                if not node.children:
                    self._leaves.add(node)
            node = node.parent

    # -- eviction --------------------------------------------------------------------------------
    def evict(self, num_tokens: int) -> int:
        """Frees at least num_tokens (whole leaves, least recently used first) if that many are
        evictable; returns the tokens freed."""
        # (recency, serial): a node's recency is the tick of the last lookup through it, one path
        # per tick, so ties cannot happen; the serial keeps the order total all the same.
        heap = [(x.last_access, x.serial, x) for x in self._leaves]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, x = heapq.heappop(heap)
            parent = x.parent
            del parent.children[x.key[0]]
            self._leaves.discard(x)
            self.evictable_size -= len(x.key)
            freed += len(x.key)
            if parent is not self.root and not parent.children and parent.lock == 0:
                self._leaves.add(parent)
                heapq.heappush(heap, (parent.last_access, parent.serial, parent))
        return freed

    # -- internals -------------------------------------------------------------------------------
    def _split(self, child: Node, k: int) -> Node:
        """Cuts child after its first k tokens; returns the new upper node (same lock, recency)."""
        upper = Node(child.key[:k], child.parent, child.last_access)
        upper.lock = child.lock
        child.parent.children[child.key[0]] = upper
        child.key = child.key[k:]
        child.parent = upper
        upper.children[child.key[0]] = child
        return upper
