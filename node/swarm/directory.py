"""The swarm's directory as one peer reads it: which announcement shards to read each step, and whether an
announcement (its signature checked already: by the DHT's validator, or by gossip.py for a view entry) is one to
learn a sender from.

Reads without peer sampling: all 64 shards while we know no sender; while we know fewer senders than we pull
from (a small swarm), all of them at most every swarm.whole_read_every seconds; otherwise swarm.shards_per_step
in rotation. With peer sampling, the view replaces the whole reads once it holds anyone, or once a seed's view
is on its way (a newcomer's first step): while the view holds fewer than pull_peers, the rotation reads about
READ_BUDGET announcements a step (`rotation_size`: one shard until a read has shown how full a shard is, then as
many as hold READ_BUDGET, at most swarm.shards_per_step; a read that brought c announcements is followed by
c // READ_BUDGET steps without one), so that a newcomer's reads do not grow with the swarm (8 shards were
2.2 MB at 10,000 peers); then swarm.gossip_shards (by default none: the view and pushes find the senders, and
the directory is the fallback). The whole directory is read only when neither the view nor the seeds have
anyone.

Checks: an announcement is decoded, its tokenizer must be ours or one we can build, it must not come from the
future (beyond CLOCK_SKEW) and must be fresh (swarm.max_age). Each is checked once: a refusal is reported the
first time it is read, and a valid one is remembered (a view brings the same announcement again and again).
"""
from __future__ import annotations

import collections
import math
from collections.abc import Callable

from node.config import SwarmConfig
from protocol import ANNOUNCE_SHARDS, CLOCK_SKEW
from protocol.codec import Announcement, RecordError, WireCard, bundle_digest, decode_announcement

from .bounded import BoundedSet, remember

READ_BUDGET = 64  # announcements read a step on average while peer sampling fills the view (about 130 KB), and
#                   by the bootstrap (seeding.py)
READ_MEMORY = 100_000  # announcements remembered as read (16-byte digests)
VALID_MEMORY = 4096  # valid announcements remembered decoded


def rotation_size(per_shard: float | None, most: int, budget: int = READ_BUDGET) -> int:
    """Shards to read in one step to get about `budget` announcements, given how many a shard held at the last
    read (None: not known yet, one shard), between 1 and `most`."""
    if per_shard is None:
        return 1
    return max(1, min(most, int(budget // max(per_shard, 1e-9))))


class Directory:
    def __init__(self, cfg: SwarmConfig, cursor: int, unusable_tokenizer: Callable[[WireCard], str]):
        """cursor: the first shard of the rotation (drawn at random by the caller); unusable_tokenizer(card):
        why a card's tokenizer cannot be used here ("" when it can)."""
        self.cfg, self.cursor, self.unusable_tokenizer = cfg, cursor, unusable_tokenizer
        self.read = BoundedSet(READ_MEMORY)  # digests of announcements read already
        self.valid: collections.OrderedDict[bytes, Announcement] = collections.OrderedDict()  # digest -> valid
        self.last_whole_read = -math.inf  # when all shards were last read (our DHT clock)
        self.per_shard: float | None = None  # announcements a shard held at the last read (None: no read yet)
        self.rest = 0  # steps to go without a budgeted read (READ_BUDGET)
        self.reading = 0  # shards of the read started last

    def shards_to_read(self, now: float, known: int, view: int = -1, seeded: bool = False) -> list[int]:
        """The shards to read this step, given how many live senders we know, how many peers our view holds (-1:
        peer sampling is off) and whether an initial peer's view is on its way or brought entries."""
        gossip = view > 0 or (view == 0 and seeded)
        if not gossip and (known == 0 or (known < self.cfg.pull_peers
                                          and now - self.last_whole_read >= self.cfg.whole_read_every)):
            self.last_whole_read = now
            shards = list(range(ANNOUNCE_SHARDS))
        elif gossip and view < self.cfg.pull_peers:  # the view is filling: about READ_BUDGET announcements
            if self.rest > 0:
                self.rest -= 1
                return []
            shards = self.rotation(rotation_size(self.per_shard, self.cfg.shards_per_step))
        else:
            shards = self.rotation(self.cfg.gossip_shards if view >= self.cfg.pull_peers else self.cfg.shards_per_step)
        self.reading = len(shards)
        return shards

    def note_read(self, announcements: int) -> None:
        """The read started last brought this many announcements: how full a shard is, and how many steps to
        rest before the next budgeted read."""
        if self.reading:
            self.per_shard = announcements / self.reading
            self.rest = announcements // READ_BUDGET

    def rotation(self, count: int) -> list[int]:
        """The next `count` shards of the rotation."""
        shards = [(self.cursor + i) % ANNOUNCE_SHARDS for i in range(count)]
        self.cursor = (self.cursor + count) % ANNOUNCE_SHARDS
        return shards

    def read_before(self, value: bytes) -> bool:
        return bundle_digest(value) in self.read

    def check(self, value: bytes, now: float) -> Announcement | tuple[str, str] | None:
        """The announcement when valid and fresh; (reason, detail) when refused, the first time it is read;
        None when refused before, or stale."""
        digest = bundle_digest(value)
        if digest in self.valid:  # valid when first read: still so while fresh
            announcement = self.valid[digest]
            return announcement if now - announcement.created <= self.cfg.max_age else None
        if not self.read.add(digest):
            return None
        try:
            announcement = decode_announcement(value)
        except RecordError as err:
            return "announcement", str(err)
        why = self.unusable_tokenizer(announcement.card)
        if why:
            return "tokenizer", why
        if announcement.created > now + CLOCK_SKEW:
            return "future", "announcement from the future"
        if now - announcement.created > self.cfg.max_age:
            return None
        remember(self.valid, digest, announcement, VALID_MEMORY)
        return announcement
