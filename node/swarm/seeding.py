"""The bootstrap's view (docs/PROTOCOL.md section 7): what a newcomer pulls first, so that its first step learns
senders without reading the whole directory, at any swarm size.

A bootstrap has no announcement and no groups of its own, but keeps a peer-sampling view like any peer
(membership.py, through gossip.py). It reads the directory in rotation as a peer's budgeted reads do
(directory.py: about READ_BUDGET announcements a read, in shards or columns as `read_plan` picks: at most
`swarm.shards_per_step` shards or two columns while its view holds fewer than `swarm.pull_peers` entries
(filling), one shard or two columns once it holds them), and never more than READ_BUDGET entries a round on
average (a read that brought c entries is followed by c // READ_BUDGET rounds without one), so its cost stays flat
in N; it pulls the views of
PULL_FANOUT peers it read there and does not hold yet, or else of its view's members, as any peer renews its
view. A view pull is also its ping, so a peer that does not answer is never handed out, and every entry's
signature and announcement are checked as any peer checks them (a bootstrap accepts every tokenizer: it trains
on nothing). It serves, as its "view" bundle, up to MAX_VIEW_ENTRIES live entries drawn at
random each round (spreading newcomers' first pulls over the swarm); a newcomer checks every entry's signature
itself, so a bootstrap can choose what it hands out but cannot forge it.

Its cost per round is bounded: READ_BUDGET directory entries on average, PULL_FANOUT view pulls, one view
served per newcomer (under the pull handler's intake limits). Its status line counts the live announcements of
the shards read within the record TTL, scaled to the whole directory by the share of it those shards cover
(`estimate`, `covered`).
"""
from __future__ import annotations

import collections
import logging
import random

from node.config import SwarmConfig
from node.errors import first_line
from protocol import SHARD_LEVELS
from protocol.codec import Announcement, announcement_shards
from protocol.view import MAX_VIEW_ENTRIES, pack_view

from . import Records, SwarmTransport
from .directory import Directory, covered  # (the bootstrap's read budget is a reader's)
from .freshness import Freshness
from .gossip import Gossip

log = logging.getLogger(__name__)

CANDIDATES = 4096  # announcements read in the directory that we may pull views from (the newest kept)
LISTED = 16384  # live directory entries remembered for the status line (the newest kept)


class SeedView:
    def __init__(self, transport: SwarmTransport, cfg: SwarmConfig, rng: random.Random):
        self.transport, self.cfg, self.rng = transport, cfg, rng
        self.gossip = Gossip(transport, rng, Freshness.of(cfg))  # (a bootstrap takes no steps: never lengthened)
        self.directory = Directory(cfg, rng.randrange(SHARD_LEVELS[-1]), lambda card: "")
        self.candidates: collections.OrderedDict[bytes, Announcement] = collections.OrderedDict()
        self.listed: collections.OrderedDict[bytes, tuple[bytes, float]] = collections.OrderedDict()
        self.reading = None  # the directory read in flight, and its shards
        self.reading_shards: list[int] = []
        self.read_at: dict[int, float] = {}  # shard -> when we last read it (the swarm's clock)
        self.refused: collections.Counter = collections.Counter()  # announcements and entries refused, by reason

    def round(self) -> None:
        """One round: takes the directory read and view pulls that finished, renews the view, serves a sample of
        it, and starts the next read and pulls. Never waits on the network."""
        if self.reading is not None and self.reading.done():
            future, self.reading = self.reading, None
            try:
                records = future.result()
                self._read(records)
                self.read_at.update(dict.fromkeys(self.reading_shards, self.transport.now()))
                self.directory.note_read(len(records))  # (and how many rounds to rest: READ_BUDGET)
            except Exception as err:  # noqa: BLE001 (the daemon outlives any read)
                log.warning("reading the directory failed: %s", first_line(err))
        self.gossip.collect(self._check, self._refuse)
        self.gossip.end_round(take_pushes=False)
        self.serve()
        if self.reading is None and self.directory.rested():
            full = self.size() >= self.cfg.pull_peers
            self.reading_shards = self.directory.budgeted(1 if full else self.cfg.shards_per_step)
            self.reading = self.transport.fetch_shards_async(self.reading_shards)
        now = self.transport.now()
        held = {e.subkey for e in self.gossip.membership.members(now)}
        fresh = [s for s, a in self.candidates.items() if s not in held and not a.relays
                 and now - a.created <= self.cfg.max_age]
        self.gossip.start(fresh, self._route)  # (a random PULL_FANOUT of them; else view members, as pings)

    def serve(self) -> list[bytes]:
        """Serves a random sample of our live view; returns the identities in it."""
        members = self.gossip.membership.members(self.transport.now())
        sample = self.rng.sample(members, min(len(members), MAX_VIEW_ENTRIES))
        self.transport.serve("view", pack_view([e.payload.signed for e in sample]))
        return [e.subkey for e in sample]

    def size(self) -> int:
        return self.gossip.size()

    def live(self) -> Records:
        """The directory entries read (in the last rotations) that have not expired: the status line's peers."""
        now = self.transport.now()
        for subkey in [k for k, (_, expires) in self.listed.items() if expires <= now]:
            del self.listed[subkey]
        return Records(self.listed)

    def estimate(self) -> int:
        """Peers publishing: the live announcements of the shards read within the record TTL, scaled to the whole
        directory by the share of it those shards cover."""
        now = self.transport.now()
        recent = {i for i, t in self.read_at.items() if now - t <= self.cfg.record_ttl}
        live = self.live()
        share = covered(recent)
        if share >= 1.0 or not recent:
            return len(live)
        counted = sum(not recent.isdisjoint(announcement_shards(s)) for s in live)
        return round(counted / share)

    def _read(self, records: Records) -> None:
        now = self.transport.now()
        for subkey in records.withdrawn:
            self.listed.pop(subkey, None)
            self.candidates.pop(subkey, None)
        for subkey, (value, expires) in records.items():
            self.listed[subkey] = (value, expires)
            self.listed.move_to_end(subkey)
            if self.directory.read_before(value):
                continue
            self._check(subkey, value, now)
        while len(self.listed) > LISTED:
            self.listed.popitem(last=False)

    def _check(self, subkey: bytes, value: bytes, now: float | None = None) -> Announcement | None:
        checked = self.directory.check(value, self.transport.now() if now is None else now)
        if isinstance(checked, tuple):
            self._refuse(subkey, *checked)
            return None
        if checked is not None:
            self.candidates[subkey] = checked
            self.candidates.move_to_end(subkey)
            while len(self.candidates) > CANDIDATES:
                self.candidates.popitem(last=False)
        return checked

    def _refuse(self, subkey: bytes, reason: str, detail: str) -> None:
        self.refused[reason] += 1
        log.debug("refused an announcement (%s): %s", reason, detail)

    def _route(self, subkey: bytes) -> tuple[str, str, tuple[str, ...]] | None:
        """(peer id, relay, addresses) of a view pull: peers reachable directly only (a peer behind relays
        reaches newcomers through the views of others)."""
        announcement = self.candidates.get(subkey)
        if announcement is None or announcement.relays:
            return None
        return announcement.peer_id, "", announcement.maddrs

