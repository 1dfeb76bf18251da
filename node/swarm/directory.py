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

Budgeted reads choose the level of shard too (`next_level`): a coarse shard holds about N / 64 announcements and
cannot be read in part, so above FINE_ABOVE a shard (N of about 2,000) they read the fine shards (N / 1024
each: protocol FINE_SHARDS), and back below READ_BUDGET; they start at the fine level, whose first read of one
shard shows how full shards are at a cost that stays small at any N. Every read feeds an estimate of the swarm's
size (`size`), which also decides which of our two records we write (`writes_coarse`, `writes_fine`): the
coarse one below about 2,000 peers, the fine one above about 256, both between, so no DHT node holding a coarse
shard takes N / 64 stores a step and a small swarm's peers store one record a step, as before. A
peer whose view is full reads one fine shard every ESTIMATE_EVERY steps to keep that estimate current.

Checks: an announcement is decoded, its tokenizer must be ours or one we can build, it must not come from the
future (beyond CLOCK_SKEW) and must be fresh (swarm.max_age). Each is checked once: a refusal is reported the
first time it is read, and a valid one is remembered (a view brings the same announcement again and again).
"""
from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable

from node.config import SwarmConfig
from protocol import ANNOUNCE_SHARDS, CLOCK_SKEW, FINE_SHARDS
from protocol.codec import Announcement, RecordError, WireCard, bundle_digest, coarse_shard, decode_announcement

from .bounded import BoundedSet, remember

READ_BUDGET = 16  # announcements read a step on average while peer sampling fills the view (about 28 KB), and
#                   by the bootstrap (seeding.py); 64 before 2026-12-05 (whose 6 ms of checks at 10,000 peers made a
#                   newcomer the busiest peer: bench/sim_discovery.py)
FINE_ABOVE = 2 * READ_BUDGET  # announcements a coarse shard holds above which budgeted reads take the fine shards
FINE_FROM = READ_BUDGET / 4  # and from which a peer writes its fine record (about 256 peers)
ESTIMATE_DECAY = 0.8  # the weight a read leaves to what the reads before it said about the swarm's size
ESTIMATE_EVERY = 50  # steps between two reads of one fine shard by a peer whose view is full (its size estimate)
SIZE_MARGIN = 2  # announcements added, beside two standard deviations (Poisson: 2 sqrt(count)), to what the reads
#                  found, for a size they are unlikely to exceed (one shard's count is a noisy measure of N)
RESCUE_STEPS = 20  # a peer's first steps, in which it reads as a filling view does while fewer than
RESCUE_HELPING = 2  # this many senders brought it informative groups, even once its view is full (seeds that
#                     filled it with identities whose groups teach nothing: the directory is how it finds others)
READ_MEMORY = 100_000  # announcements remembered as read (16-byte digests)
VALID_MEMORY = 4096  # valid announcements remembered decoded


def rotation_size(per_shard: float | None, most: int, budget: int = READ_BUDGET) -> int:
    """Shards to read in one step to get about `budget` announcements, given how many a shard holds (None: not
    known yet, one shard), between 1 and `most`."""
    if per_shard is None:
        return 1
    return max(1, min(most, int(budget // max(per_shard, 1e-9))))


def next_level(fine: bool, coarse_fill: float) -> bool:
    """Whether budgeted reads take the fine shards next, given the level they took and how many announcements a
    coarse shard holds at most by our reads: fine until that is below READ_BUDGET once fine (one fine shard
    found empty, READ_BUDGET at most, is not enough to take whole coarse shards), and from more than FINE_ABOVE
    once coarse (between the two, the level stays: no flapping on a shard's chance fill)."""
    return coarse_fill >= READ_BUDGET if fine else coarse_fill > FINE_ABOVE


def covered(shards: Iterable[int]) -> float:
    """The share of the directory's identities that these shard ids (coarse and fine) hold: a fine shard within a
    coarse one in the set adds nothing."""
    shards = set(shards)
    coarse = {s for s in shards if s < ANNOUNCE_SHARDS}
    fine = {s for s in shards if s >= ANNOUNCE_SHARDS and coarse_shard(s) not in coarse}
    return len(coarse) / ANNOUNCE_SHARDS + len(fine) / FINE_SHARDS


class Directory:
    def __init__(self, cfg: SwarmConfig, cursor: int, unusable_tokenizer: Callable[[WireCard], str]):
        """cursor: where the rotations start (drawn at random by the caller, below FINE_SHARDS: the coarse one at
        cursor mod ANNOUNCE_SHARDS); unusable_tokenizer(card): why a card's tokenizer cannot be used here ("" when
        it can)."""
        self.cfg, self.unusable_tokenizer = cfg, unusable_tokenizer
        self.cursor, self.fine_cursor = cursor % ANNOUNCE_SHARDS, cursor % FINE_SHARDS
        self.read = BoundedSet(READ_MEMORY)  # digests of announcements read already
        self.valid: collections.OrderedDict[bytes, Announcement] = collections.OrderedDict()  # digest -> valid
        self.last_whole_read = -math.inf  # when all shards were last read (our DHT clock)
        self.mass = self.count = 0.0  # the swarm's size as our reads saw it: shares of the directory read and the
        #                               announcements they held, older reads weighed down by ESTIMATE_DECAY each
        self.fine = True  # budgeted reads take the fine shards (next_level)
        self.rest = 0  # steps to go without a budgeted read (READ_BUDGET)
        self.reading: list[int] = []  # the shards of the read started last
        self.idle = 0  # steps since a read started
        self.steps = 0  # steps asked about (shards_to_read)

    def size(self) -> float | None:
        """Announcements in the whole directory, by our reads (None before the first)."""
        return self.count / self.mass if self.mass else None

    def size_above(self) -> float | None:
        """A size the directory is unlikely to exceed, by our reads (None before the first): what sizes a read,
        so that a read that found next to nothing (one fine shard of a small swarm) is not followed by 8 full
        coarse shards of a large one."""
        return (self.count + 2 * math.sqrt(self.count) + SIZE_MARGIN) / self.mass if self.mass else None

    @property
    def per_shard(self) -> float | None:
        """Announcements a shard of the budgeted reads' level holds at most, by our reads (None: not known)."""
        size = self.size_above()
        return None if size is None else size / (FINE_SHARDS if self.fine else ANNOUNCE_SHARDS)

    def writes_coarse(self) -> bool:
        """Whether we write our coarse record: until a read has shown the swarm's size, and while a coarse shard
        holds at most FINE_ABOVE by our estimate, so that wherever readers read the coarse shards (next_level)
        the writers write them, and in a large swarm the nodes that hold a coarse shard do not take N / 64 stores
        a step."""
        return self.mass == 0 or self.size() / ANNOUNCE_SHARDS <= FINE_ABOVE

    def writes_fine(self) -> bool:
        """Whether we write our fine record: once our estimate puts a coarse shard at FINE_FROM or more (readers,
        whose estimate is pessimistic, may read the fine shards from about READ_BUDGET); below, a second record a
        step would double every peer's DHT stores for shards nobody reads (measured on the real network with
        both written: the download 1.52x from 5 to 100 peers, against 1.03x with one)."""
        return self.mass > 0 and self.size() / ANNOUNCE_SHARDS >= FINE_FROM

    def shards_to_read(self, now: float, known: int, view: int = -1, seeded: bool = False,
                       helping: int = RESCUE_HELPING) -> list[int]:
        """The shards to read this step, given how many live senders we know, how many peers our view holds (-1:
        peer sampling is off), whether an initial peer's view is on its way or brought entries, and how many of
        our senders brought informative groups."""
        gossip = view > 0 or (view == 0 and seeded)
        self.idle += 1
        self.steps += 1
        rescue = helping < RESCUE_HELPING and self.steps <= RESCUE_STEPS
        if not gossip and (known == 0 or (known < self.cfg.pull_peers
                                          and now - self.last_whole_read >= self.cfg.whole_read_every)):
            self.last_whole_read = now
            return self._start(list(range(ANNOUNCE_SHARDS)))
        if gossip and (view < self.cfg.pull_peers or rescue):  # filling: about READ_BUDGET announcements
            if self.rest > 0:
                self.rest -= 1
                return []
            return self.budgeted(self.cfg.shards_per_step)
        count = self.cfg.gossip_shards if view >= self.cfg.pull_peers else self.cfg.shards_per_step
        if count == 0:  # a full view: one fine shard now and then keeps our size estimate (writes_coarse) current
            return self._start(self.rotation(1, fine=True)) if self.idle >= ESTIMATE_EVERY else []
        return self._start(self.rotation(count))

    def budgeted(self, most: int) -> list[int]:
        """The shards of a read of about READ_BUDGET announcements (at most `most` shards), at the level
        `next_level` chose."""
        return self._start(self.rotation(rotation_size(self.per_shard, most), self.fine))

    def _start(self, shards: list[int]) -> list[int]:
        self.reading, self.idle = shards, 0
        return shards

    def note_read(self, announcements: int) -> None:
        """The read started last brought this many announcements: the swarm's size, the level of the next
        budgeted read, and how many steps to rest before it."""
        if self.reading:
            self.mass = self.mass * ESTIMATE_DECAY + covered(self.reading)
            self.count = self.count * ESTIMATE_DECAY + announcements
            self.fine = next_level(self.fine, self.size_above() / ANNOUNCE_SHARDS)
            self.rest = announcements // READ_BUDGET

    def rotation(self, count: int, fine: bool = False) -> list[int]:
        """The ids of the next `count` shards of the rotation, coarse or fine."""
        if fine:
            shards = [ANNOUNCE_SHARDS + (self.fine_cursor + i) % FINE_SHARDS for i in range(count)]
            self.fine_cursor = (self.fine_cursor + count) % FINE_SHARDS
            return shards
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
