"""Bounded memories: what a peer remembers of strangers never grows without limit."""
from __future__ import annotations

import collections


class BoundedSet:
    """A set that forgets its oldest members beyond `size` (memory of what was handled, bounded)."""

    def __init__(self, size: int):
        self.size, self._items = size, collections.OrderedDict()

    def add(self, key) -> bool:
        """Adds key; False when it was already there."""
        if key in self._items:
            return False
        self._items[key] = None
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return True

    def __contains__(self, key) -> bool:
        return key in self._items

    def __iter__(self):
        """Members, oldest first (a checkpoint saves them in this order, so a restore keeps the age order)."""
        return iter(list(self._items))


def remember(table: collections.OrderedDict, key, value, size: int) -> None:
    """table[key] = value as its newest entry, forgetting the oldest beyond `size`."""
    table[key] = value
    table.move_to_end(key)
    while len(table) > size:
        table.popitem(last=False)
