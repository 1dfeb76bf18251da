"""Which training prompts a peer in the swarm answers: drawn from its identity and the second, so that a group
proves who generated it.

A group's item index is `protocol.codec.drawn_index(subkey, stamp, slot)`: the hash of the peer's identity
(the DHT subkey its bundles are signed under) and a second of the swarm's clock, with the slot (0..255) in the
low bits; the group travels stamped with that second (`created`). A receiver checks the index against the
identity that signed the bundle (`is_drawn`), so a peer that pulls others' groups and serves them as its own
(front-running: credit theft, and the partner's own copies refused as replays) has every such group refused,
while a bundle relayed or cached whole keeps its owner's signature and stays its generator's.

Drawing is pure bookkeeping: the slots of one second are handed out in order across steps (a zoo peer takes
4 prompts a step, several steps a second); when a second's 256 slots run out the next draw takes the next
second, a little ahead of the clock (well within protocol.CLOCK_SKEW at any real rate).
"""
from __future__ import annotations

import collections

from node.tasks import Task
from protocol.codec import DRAW_SLOTS, drawn_index

REMEMBERED = 4096  # own drawn indices remembered with their second (a step publishes what it drew just before)


class Draws:
    def __init__(self, subkey: bytes):
        self.subkey = subkey
        self.stamp, self.used = -1, 0  # the second of the latest draw and the slots of it taken
        self.stamps: collections.OrderedDict[int, int] = collections.OrderedDict()  # index -> its second

    def indices(self, n: int, now: float) -> list[int]:
        """The item indices of n prompts drawn now (each second's slots in order; past a second's 256, the next
        second's)."""
        drawn = []
        while len(drawn) < n:
            if int(now) > self.stamp:
                self.stamp, self.used = int(now), 0
            elif self.used == DRAW_SLOTS:
                self.stamp, self.used = self.stamp + 1, 0
            take = min(n - len(drawn), DRAW_SLOTS - self.used)
            for slot in range(self.used, self.used + take):
                index = drawn_index(self.subkey, self.stamp, slot)
                drawn.append(index)
                self.stamps[index] = self.stamp
                self.stamps.move_to_end(index)
            self.used += take
        while len(self.stamps) > max(REMEMBERED, n):
            self.stamps.popitem(last=False)
        return drawn

    def items(self, task: Task, split: str, n: int, now: float) -> list:
        """n training items of `task` drawn now."""
        return [task.item(split, index) for index in self.indices(n, now)]

    def stamp_of(self, index: int) -> int:
        """The second an index we drew was drawn at (what its group is stamped with); KeyError if we did not."""
        return self.stamps[index]
