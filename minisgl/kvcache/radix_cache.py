"""A radix tree of token pages: SGLang's prefix cache.

Each edge holds a run of whole pages (tokens and the KV pages that store them). Matching walks
page by page and splits an edge where a prompt diverges inside it, so a match always ends on a
node. Locks count along the path to the root; leaves with no lock are evicted least recently
used first. Each namespace (a LoRA adapter's KV, see BasePrefixCache) has a root of its own, never
evicted; the base model's is `root`.

Host memory: the tree lives as long as its KV pages, so it grows with the cache until the cache is
full and eviction balances it (a soak with unique prompts sees the scheduler grow per request
until then; benchmark/NOTES.md has the figure). Tokens and page numbers are kept as C int32
arrays (4 bytes each) rather than tuples and lists of Python ints (about 40 bytes each), so that
growth is a tenth of what it was, and bounded by the cache size either way.
"""

from __future__ import annotations

import heapq
import itertools
from array import array

from .base import BasePrefixCache


class RadixNode:
    __slots__ = ("key", "pages", "children", "parent", "lock_ref", "last_access")

    def __init__(self, key: array | None = None, pages: array | None = None, parent: RadixNode | None = None):
        self.key = key if key is not None else array("i")  # tokens on the edge into this node, whole pages
        self.pages = pages if pages is not None else array("i")
        self.children: dict[bytes, RadixNode] = {}  # keyed by the child's first page of tokens
        self.parent = parent
        self.lock_ref = 0
        self.last_access = 0


class RadixPrefixCache(BasePrefixCache):
    def __init__(self, page_size: int):
        self.page_size = page_size
        self.root = RadixNode()
        self.root.lock_ref = 1  # never evicted
        self.roots: dict[int, RadixNode] = {0: self.root}
        self._clock = itertools.count(1)
        self._evictable = 0
        self._total = 0

    # -- helpers ------------------------------------------------------------------------------

    def _first_page(self, tokens, start: int = 0) -> bytes:
        page = tokens[start : start + self.page_size]
        return (page if isinstance(page, array) else array("i", page)).tobytes()

    def _common_pages(self, key: array, tokens, start: int) -> int:
        p, n = self.page_size, 0
        while (n + 1) * p <= len(key) and start + (n + 1) * p <= len(tokens) and \
                key[n * p : (n + 1) * p] == array("i", tokens[start + n * p : start + (n + 1) * p]):
            n += 1
        return n

    def _split(self, node: RadixNode, pages: int) -> RadixNode:
        """Cut node's edge after `pages` pages; return the new upper node."""
        cut = pages * self.page_size
        upper = RadixNode(node.key[:cut], node.pages[:pages], node.parent)
        upper.lock_ref, upper.last_access = node.lock_ref, node.last_access
        node.parent.children[self._first_page(upper.key)] = upper
        node.key, node.pages, node.parent = node.key[cut:], node.pages[pages:], upper
        upper.children[self._first_page(node.key)] = node
        return upper

    def _root(self, namespace: int) -> RadixNode:
        if namespace not in self.roots:
            self.roots[namespace] = RadixNode()
            self.roots[namespace].lock_ref = 1
        return self.roots[namespace]

    def _walk(self, tokens, namespace: int = 0) -> tuple[RadixNode, list[int], int]:
        """Deepest node matching a page-aligned prefix of tokens: (node, pages, tokens matched)."""
        node, pages, pos, now = self._root(namespace), [], 0, next(self._clock)
        while pos + self.page_size <= len(tokens):
            child = node.children.get(self._first_page(tokens, pos))
            if child is None:
                break
            n = self._common_pages(child.key, tokens, pos)
            if n * self.page_size < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            pages += child.pages.tolist()
            pos += len(child.key)
            node = child
        return node, pages, pos

    # -- interface ----------------------------------------------------------------------------

    def match(self, tokens, namespace=0):
        node, pages, _ = self._walk(tokens, namespace)
        return node, pages

    def insert(self, tokens, pages, namespace=0):
        assert len(tokens) == len(pages) * self.page_size, "insert takes whole pages"
        node, _, pos = self._walk(tokens, namespace)
        already = pos // self.page_size
        if already < len(pages):
            leaf = RadixNode(array("i", tokens[pos:]), array("i", pages[already:]), node)
            leaf.last_access = next(self._clock)
            node.children[self._first_page(leaf.key)] = leaf
            self._total += len(leaf.pages)
            self._evictable += len(leaf.pages)
        return already

    def drop_namespace(self, namespace):
        root = self.roots.pop(namespace, None) if namespace else None
        freed: list[int] = []
        stack = list(root.children.values()) if root is not None else []
        while stack:
            node = stack.pop()
            assert node.lock_ref == 0, "a dropped namespace's pages are in use"
            stack.extend(node.children.values())
            freed += node.pages.tolist()
        self._total -= len(freed)
        self._evictable -= len(freed)
        return freed

    def lock(self, handle: RadixNode) -> None:
        node = handle
        while node is not None:
            if node.lock_ref == 0:
                self._evictable -= len(node.pages)
            node.lock_ref += 1
            node = node.parent

    def unlock(self, handle: RadixNode) -> None:
        node = handle
        while node is not None:
            node.lock_ref -= 1
            assert node.lock_ref >= 0, "unlock without lock"
            if node.lock_ref == 0:
                self._evictable += len(node.pages)
            node = node.parent

    def evict(self, num_pages):
        leaves = [(n.last_access, id(n), n) for n in self._nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(leaves)
        freed: list[int] = []
        while leaves and len(freed) < num_pages:
            _, _, leaf = heapq.heappop(leaves)
            freed += leaf.pages.tolist()
            self._evictable -= len(leaf.pages)
            self._total -= len(leaf.pages)
            parent = leaf.parent
            del parent.children[self._first_page(leaf.key)]
            if parent.parent is not None and not parent.children and parent.lock_ref == 0:  # not a root
                heapq.heappush(leaves, (parent.last_access, id(parent), parent))
        return freed

    def _nodes(self):
        stack = list(self.roots.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if node.parent is not None:  # not a root
                yield node

    @property
    def evictable_pages(self):
        return self._evictable

    @property
    def cached_pages(self):
        return self._total
