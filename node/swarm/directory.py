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

Levels (protocol SHARD_LEVELS: 64, 256, 1,024 and 4,096 shards, each shard within one of every level above): a
peer writes its announcement at one level, the coarsest whose shards hold fewer than FANOUT (4) by its estimate
of the swarm's size (`write_level`), so no DHT node holding a shard takes more than about 4 stores of it a step
up to 16,000 peers, and every peer stores one record a step. Writers' estimates differ, so near a level's edges
some write the level above or below: budgeted reads therefore take *columns* (`read_plan`), a shard and the
FANOUT shards of the next level within it, which together hold every writer of that part of the directory who
wrote at either level; a reader picks the column whose pair of levels holds the writers whose estimates are
within 2x of its own pessimistic one (a single shard of level 0 in a small swarm, of the finest level in a large
one). A column holds 2 to 8 announcements at the reader's estimate; they start with one shard of the finest
level, which shows how full shards are at a cost that stays small at any N. Every read feeds the estimate
(`size`). A peer whose view is full reads one column every ESTIMATE_EVERY steps to keep that estimate current.

Checks: an announcement is decoded, its tokenizer must be ours or one we can build, it must not come from the
future (beyond CLOCK_SKEW) and must be fresh (swarm.max_age). Each is checked once: a refusal is reported the
first time it is read, and a valid one is remembered (a view brings the same announcement again and again).
"""
from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable

from node.config import SwarmConfig
from protocol import ANNOUNCE_SHARDS, CLOCK_SKEW, SHARD_LEVELS
from protocol.codec import (
    Announcement,
    RecordError,
    SwarmTask,
    WireCard,
    bundle_digest,
    decode_announcement,
    shard_id,
    shard_level,
    shard_within,
)

from .bounded import BoundedSet, remember
from .freshness import Freshness

READ_BUDGET = 16  # announcements read a step on average while peer sampling fills the view (about 28 KB), and
#                   by the bootstrap (seeding.py); 64 before 2026-12-05 (whose 6 ms of checks at 10,000 peers made a
#                   newcomer the busiest peer: bench/sim/discovery.py)
FANOUT = SHARD_LEVELS[1] // SHARD_LEVELS[0]  # shards of the next level within a shard (4); a peer writes at the
#                   coarsest level whose shards hold fewer than FANOUT announcements by its estimate
ESTIMATE_DECAY = 0.8  # the weight a read leaves to what the reads before it said about the swarm's size
ESTIMATE_EVERY = 50  # steps between two reads of one shard by a peer whose view is full (its size estimate)
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


def write_level(size: float) -> int:
    """The level a peer writes its announcement at in a swarm of about `size` announcements (its estimate): the
    coarsest whose shards hold fewer than FANOUT (the finest when none does)."""
    for level, count in enumerate(SHARD_LEVELS):
        if size < FANOUT * count:
            return level
    return len(SHARD_LEVELS) - 1


def read_plan(size: float) -> tuple[int, bool]:
    """(level, column) of budgeted reads in a swarm of at most about `size` announcements (a pessimistic
    estimate): a column of level l (l and l + 1) while size is within [2, 8) shards' worth of level l, so that it
    holds every writer whose estimate is within 2x of ours; below that, single shards of level 0 (everyone there
    writes level 0); above, single shards of the finest level."""
    if size < 2 * SHARD_LEVELS[0]:
        return 0, False
    for level, count in enumerate(SHARD_LEVELS[:-1]):
        if size < 2 * FANOUT * count:  # (2 shards' worth of the next level)
            return level, True
    return len(SHARD_LEVELS) - 1, False


def read_levels(plan: tuple[int, bool]) -> tuple[int, ...]:
    """The levels a read of this plan finds writers at."""
    level, column = plan
    return (level, level + 1) if column else (level,)


def covered(shards: Iterable[int]) -> float:
    """The share of the directory's identities that these shard ids (of any level) hold: a shard within another
    shard of the set adds nothing."""
    shards = set(shards)
    share = 0.0
    for shard in shards:
        level, _ = shard_level(shard)
        if not any(shard_within(shard, above) in shards for above in range(level)):
            share += 1 / SHARD_LEVELS[level]
    return share


def other_task(theirs: SwarmTask | None, ours: SwarmTask) -> bool:
    """Whether an announced task is another than ours (name or item version; one that names none may be ours:
    its records are checked one by one)."""
    return theirs is not None and (theirs.name, theirs.version) != (ours.name, ours.version)


class Directory:
    def __init__(self, cfg: SwarmConfig, cursor: int, unusable_tokenizer: Callable[[WireCard], str],
                 task: SwarmTask | None = None, decode: Callable[[bytes], Announcement] = decode_announcement,
                 freshness: Freshness | None = None):
        """cursor: where the rotations start (drawn at random by the caller, below the finest level's count: each
        level's at cursor mod its count); unusable_tokenizer(card): why a card's tokenizer cannot be used here
        ("" when it can); task: ours (an announcement of another is refused as "other-task"; None: any); decode:
        an announcement's bytes to its fields (raises RecordError; a simulation of many peers shares the results);
        freshness: the peer's (None: the configured seconds, never lengthened)."""
        self.cfg, self.unusable_tokenizer, self.task, self.decode = cfg, unusable_tokenizer, task, decode
        self.freshness = Freshness.of(cfg) if freshness is None else freshness  # older announcements are stale
        self.cursors = [cursor % count for count in SHARD_LEVELS]
        self.read = BoundedSet(READ_MEMORY)  # digests of announcements read already
        self.valid: collections.OrderedDict[bytes, Announcement] = collections.OrderedDict()  # digest -> valid
        self.last_whole_read = -math.inf  # when all shards were last read (our DHT clock)
        self.mass = self.count = 0.0  # the swarm's size as our reads saw it: shares of the directory read and the
        #                               announcements they held, older reads weighed down by ESTIMATE_DECAY each
        self.plan = (len(SHARD_LEVELS) - 1, False)  # what budgeted reads take (read_plan): a finest shard first
        self.rest = 0  # steps to go without a budgeted read (READ_BUDGET)
        self.reading: list[int] = []  # the shards of the read started last
        self.idle = 0  # steps since a read started
        self.steps = 0  # steps asked about (shards_to_read)

    def size(self) -> float | None:
        """Announcements in the whole directory, by our reads (None before the first)."""
        return self.count / self.mass if self.mass else None

    def size_above(self) -> float | None:
        """A size the directory is unlikely to exceed, by our reads (None before the first): what sizes a read,
        so that a read that found next to nothing (one shard of the finest level in a small swarm) is not
        followed by 8 full shards of a coarser level in a large one."""
        return (self.count + 2 * math.sqrt(self.count) + SIZE_MARGIN) / self.mass if self.mass else None

    @property
    def per_shard(self) -> float | None:
        """Announcements a unit of the budgeted reads (a shard, or a column) holds at most, by our reads (None: not
        known)."""
        size = self.size_above()
        return None if size is None else size / SHARD_LEVELS[self.plan[0]]

    def writes(self) -> tuple[int, ...]:
        """The levels we write our announcement at (one): level 0 until a read has shown the swarm's size, then
        `write_level` of our estimate."""
        return (0,) if self.mass == 0 else (write_level(self.size()),)

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
            return self.budgeted(self.cfg.shards_per_step) if self.rested() else []
        count = self.cfg.gossip_shards if view >= self.cfg.pull_peers else self.cfg.shards_per_step
        if count == 0:  # a full view: one shard now and then keeps our size estimate (writes) current
            return self._start(self.rotation(1, *self.plan)) if self.idle >= ESTIMATE_EVERY else []
        return self._start(self.rotation(count))

    def rested(self) -> bool:
        """Whether a budgeted read may start now (asked once a step while none is in flight): after a read that
        brought c announcements, the next c // READ_BUDGET asks say no."""
        if self.rest > 0:
            self.rest -= 1
            return False
        return True

    def budgeted(self, most: int) -> list[int]:
        """The shards of a read of about READ_BUDGET announcements, as `read_plan` chose: at most `most` single
        shards, or as many columns as fit in `most` shards but at least two (a read of one column holding one
        announcement leaves the estimate too uncertain to leave a level whose columns hold that few)."""
        units = max(2, most // (1 + FANOUT)) if self.plan[1] else most
        return self._start(self.rotation(rotation_size(self.per_shard, units), *self.plan))

    def _start(self, shards: list[int]) -> list[int]:
        self.reading, self.idle = shards, 0
        return shards

    def note_read(self, announcements: int) -> None:
        """The read started last brought this many announcements: the swarm's size, the level of the next
        budgeted read, and how many steps to rest before it."""
        if self.reading:
            self.mass = self.mass * ESTIMATE_DECAY + covered(self.reading)
            self.count = self.count * ESTIMATE_DECAY + announcements
            self.plan = read_plan(self.size_above())
            self.rest = announcements // READ_BUDGET

    def rotation(self, count: int, level: int = 0, column: bool = False) -> list[int]:
        """The ids of the next `count` shards of a level's rotation, each with the FANOUT shards of the next level
        within it when `column`."""
        total = SHARD_LEVELS[level]
        numbers = [(self.cursors[level] + i) % total for i in range(min(count, total))]
        self.cursors[level] = (self.cursors[level] + count) % total
        shards = [shard_id(level, j) for j in numbers]
        if column:
            shards += [shard_id(level + 1, j + k * total) for j in numbers for k in range(FANOUT)]
        return shards

    def read_before(self, value: bytes) -> bool:
        return bundle_digest(value) in self.read

    def check(self, value: bytes, now: float) -> Announcement | tuple[str, str] | None:
        """The announcement when valid and fresh; (reason, detail) when refused, the first time it is read;
        None when refused before, or stale."""
        digest = bundle_digest(value)
        if digest in self.valid:  # valid when first read: still so while fresh
            announcement = self.valid[digest]
            return announcement if now - announcement.created <= self.freshness.max_age else None
        if not self.read.add(digest):
            return None
        try:
            announcement = self.decode(value)
        except RecordError as err:
            return "announcement", str(err)
        if self.task is not None and other_task(announcement.task, self.task):
            return "other-task", (f"an announcement of task {announcement.task.describe()}, not ours "
                                  f"({self.task.describe()}): a swarm trains one task")
        why = self.unusable_tokenizer(announcement.card)
        if why:
            return "tokenizer", why
        if announcement.created > now + CLOCK_SKEW:
            return "future", "announcement from the future"
        if now - announcement.created > self.freshness.max_age:
            return None
        remember(self.valid, digest, announcement, VALID_MEMORY)
        return announcement
