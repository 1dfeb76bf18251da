"""One peer's discovery, step by step: whom it learns of and whom it pulls groups from.

A step of discovery, in order (docs/PROTOCOL.md section 7 says why each part is there):
1. `serve`: with our announcement, a sample of our view (gossip.py), the peers whose groups helped us first.
2. `begin`, at the beginning of a step: the view pulls (established senders first; while the view is empty, the
   seeds: DHT neighbours, then initial peers; while stranded, the seeds not asked yet), the pushes, the pushes
   taken; a view drained below pull_peers refilled from the entries held of established senders; the directory
   shards to read (directory.py), the read started; the senders' bundles pulled (senders.py chooses), unless a
   seed's view is on its way that may name better ones.
3. `take_views` and `read`, while the step gathers: the view pulls that finished, each entry checked as an
   announcement; the directory read, awaited only while the view holds fewer peers than we pull from; senders
   learned from either; more bundles pulled.
4. `end`: senders distrusted or demoted leave the view, and the view is renewed from this step's pulls (and its
   pushes, once we have 2 established senders).

Everything that crosses the network goes through the transport (a `SwarmTransport`: pull_async, hello_async,
take_hellos, seeds, fetch_shards_async, serve, verify, owns, now), and a refusal is reported through a callback;
nothing here reads a group. So the same step runs in the node over hivemind or the in-process MemorySwarm, and in
bench/sim/discovery.py over a simulated swarm of 10,000 peers.
"""
from __future__ import annotations

import logging
import random
from collections.abc import Callable
from concurrent.futures import Future

from node.config import SwarmConfig
from node.errors import first_line
from protocol import SHARD_LEVELS
from protocol.codec import Announcement, SwarmTask, WireCard, decode_announcement

from . import SwarmTransport
from .directory import RESCUE_STEPS, Directory
from .freshness import Freshness
from .gossip import Gossip
from .membership import NEWCOMER_PUSH_FANOUT, PUSH_FANOUT
from .pulls import Pulls
from .senders import SenderLedger

log = logging.getLogger(__name__)
Reject = Callable[[bytes, str, str], None]  # (sender, reason, detail): a refusal, counted by the caller
Learned = Callable[[bytes, Announcement], None]  # (sender, announcement): a sender's announcement new to us


class Discovery:
    def __init__(self, transport: SwarmTransport, cfg: SwarmConfig, ledger: SenderLedger, rng: random.Random,
                 task: SwarmTask | None, unusable_tokenizer: Callable[[WireCard], str], limits: dict[str, int],
                 gossip_rng: random.Random, learned: Learned = lambda sender, announcement: None,
                 membership: dict | None = None, decode: Callable[[bytes], Announcement] = decode_announcement,
                 freshness: Freshness | None = None):
        """ledger: the senders we know and how they served us (shared with the exchange, which scores them);
        limits: the largest bundle of each kind pulled from a sender; learned: told of every announcement new to
        us that passed the checks; membership: options of the view (membership.py; a benchmark's control); decode: an
        announcement's bytes to its fields (directory.py); freshness: the peer's, which its steps may lengthen
        (None: the configured seconds)."""
        self.transport, self.cfg, self.ledger, self.learned = transport, cfg, ledger, learned
        self.freshness = Freshness.of(cfg) if freshness is None else freshness
        self.directory = Directory(cfg, rng.randrange(SHARD_LEVELS[-1]), unusable_tokenizer, task, decode,
                                   self.freshness)
        self.pulls = Pulls(transport, ledger, rng, limits)
        self.gossip = Gossip(transport, gossip_rng, self.freshness, membership) if cfg.gossip else None
        self.reading: Future | None = None  # the directory read in flight (one at a time, never doubled)
        self.steps = 0  # steps begun (a newcomer is stranded from its second to RESCUE_STEPS)
        self._heard = 0  # pushes taken before this step

    # ---- 1. serving ---------------------------------------------------------------------------------------
    def serve(self, value: bytes, created: float) -> None:
        """Serves our announcement `value` with a sample of our view (nothing without peer sampling)."""
        if self.gossip is not None:
            self.gossip.serve(value, created, self.ledger.vouched(self.transport.now()))

    # ---- 2. the beginning of a step ------------------------------------------------------------------------
    def begin(self) -> None:
        """Starts the step's view pulls and pushes, its directory read (none while one is in flight) and its
        bundle pulls; while a seed's view is on its way, the bundle pulls wait for it (take_views)."""
        seeded = self._start_gossip()  # (first: an initial peer's view on its way spares a whole read)
        if self.reading is None or self.reading.done():
            now = self.transport.now()
            if self.gossip is not None:
                self.gossip.refill(self.ledger.vouched(now), self.cfg.pull_peers)
            view = self.gossip.size() if self.gossip is not None else -1
            shards = self.directory.shards_to_read(now, len(self.ledger.live(now)), view, seeded,
                                                   self.ledger.helping(now))
            self.reading = self.transport.fetch_shards_async(shards) if shards else None
        if self.gossip is None or not self.gossip.seeding:
            self.start_pulls()

    def _start_gossip(self) -> bool:
        """Starts this step's view pulls: from established senders first; while our view is empty and none is
        established, from the senders we know from the DHT and from our seeds, and from the seeds not asked yet
        while we are stranded (past our first step, within RESCUE_STEPS, no sender has helped). Returns whether
        a seed's view is on its way or brought entries."""
        if self.gossip is None:
            return False
        now = self.transport.now()
        present = [] if self.gossip.size() else self.ledger.present(now)
        self.steps += 1
        stranded = 2 <= self.steps <= RESCUE_STEPS and self.ledger.helping(now) == 0
        seeded = self.gossip.ask_seeds(stranded)
        vouched = self.ledger.vouched(now)
        self.gossip.start(vouched or present, self.route)
        self.gossip.push(present, self.route, PUSH_FANOUT if vouched else NEWCOMER_PUSH_FANOUT)
        self.gossip.hear()
        return seeded

    def route(self, subkey: bytes) -> tuple[str, str, tuple[str, ...]] | None:
        """(peer id, relay, addresses) of a request to `subkey`, from its newest announcement we know."""
        state = self.ledger.known.get(subkey)
        if state is None:
            return None
        via, maddrs = self.pulls.route(state.announcement)
        return state.announcement.peer_id, via, maddrs

    def start_pulls(self) -> None:
        """Starts pulling the latest bundles of newly chosen senders, up to swarm.pull_peers in flight."""
        self.pulls.start(self.ledger.step, self.cfg.pull_peers, self.cfg.explore_pulls)

    # ---- 3. while the step gathers ----------------------------------------------------------------------------
    def take_views(self, reject: Reject) -> None:
        """Takes the view pulls that finished (ours, pushers' and seeds'), each entry checked as an announcement,
        then pulls from the senders they named."""
        self._collect_views(reject)
        self.start_pulls()

    def _collect_views(self, reject: Reject) -> None:
        """The view pulls that finished, each entry checked as an announcement (nothing without peer sampling)."""
        if self.gossip is not None:
            self.gossip.collect(lambda subkey, value: self._check_gossiped(subkey, value, reject), reject)

    def view_full(self) -> bool:
        """Peer sampling is on and our view holds at least as many peers as we pull from."""
        return self.gossip is not None and self.gossip.size() >= self.cfg.pull_peers

    def read(self, wait: float, reject: Reject) -> tuple[int, int]:
        """Takes the directory read, waiting for it at most `wait` seconds, or not at all while our view is full
        (a read still running is kept for the next step); learns its senders and pulls from the new ones.
        Returns (reads still running at the deadline, reads failed): 0 or 1 each."""
        late = failed = 0
        future, self.reading = self.reading, None
        records = None
        if future is not None:
            try:
                records = future.result(timeout=0.0 if self.view_full() else wait)
            except TimeoutError:
                if not future.done():  # still running: taken when it lands
                    self.reading = future
                else:
                    log.debug("a directory read timed out (silent DHT nodes?); the next step reads again")
                late = 1
            except Exception as err:  # noqa: BLE001 (the network layer's failures must never stop training)
                log.warning("reading announcements failed (%s); this step trains on what it has", first_line(err))
                failed = 1
        if records is not None:
            self.directory.note_read(len(records))
            self.ledger.forget(getattr(records, "withdrawn", ()))  # withdrawn since we learned them
            self._learn(records, reject)
            self.transport.relay_owners = self.relay_owners()
        self.start_pulls()
        return late, failed

    def _learn(self, records: dict, reject: Reject) -> None:
        """Remembers the senders of valid, fresh announcements that speak our tokenizer; refuses the others,
        once per announcement."""
        now = self.transport.now()
        for sender, (value, expires) in records.items():
            if self.directory.read_before(value):
                continue
            announcement = self._check(sender, value, reject)
            if announcement is not None:
                self.ledger.learn(sender, announcement, expires, seen=now)
                self.learned(sender, announcement)

    def _check(self, sender: bytes, value: bytes, reject: Reject) -> Announcement | None:
        """An announcement whose signature holds, decoded and checked (directory.py): None when refused (counted
        the first time it is read) or stale."""
        checked = self.directory.check(value, self.transport.now())
        if isinstance(checked, tuple):
            reject(sender, *checked)
            return None
        if checked is None:  # stale, or refused when first read (a view may carry it again)
            return None
        if not self.transport.owns(sender, checked.peer_id):  # (else anyone could aim pulls at anyone)
            reject(sender, "identity", f"an announcement naming peer id {checked.peer_id[:16]!r}, which its "
                                       f"signing key does not own")
            return None
        return checked

    def _check_gossiped(self, sender: bytes, value: bytes, reject: Reject) -> Announcement | None:
        """A view entry's announcement (its signature checked by gossip.py): checked as one read from the DHT,
        and its sender learned when it is new to us."""
        new = not self.directory.read_before(value)
        announcement = self._check(sender, value, reject)
        if announcement is not None and self.ledger.shunned(announcement.peer_id):
            return None  # (not a refusal: it stays out of our view, and is not pulled)
        if announcement is not None and new:
            self.ledger.learn(sender, announcement, announcement.created + self.freshness.max_age,
                              seen=self.transport.now())
            self.learned(sender, announcement)
        return announcement

    def relay_owners(self) -> dict[str, int]:
        """The peers whose live announcement names us as a relay (the only owners our node relays pulls for),
        each with the largest bundle it announced (what a relayed pull of it may carry, dht.py)."""
        me, now = self.transport.peer_id, self.transport.now()
        return {s.announcement.peer_id: max(s.announcement.groups.size, s.announcement.summaries.size)
                for s in self.ledger.known.values() if me in s.announcement.relays and s.expires > now}

    def relays(self) -> tuple[str, ...]:
        """In client mode (no inbound connections), the peers that relay pulls to us: the last ones we pulled
        from directly, which are reachable and hold a connection we opened."""
        return self.pulls.relays() if self.cfg.client_mode else ()

    # ---- 4. the end of a step -----------------------------------------------------------------------------
    def end(self) -> tuple[int, int]:
        """Ends the view's round: senders distrusted or demoted leave the view; pushes are taken only once we have
        2 established senders (a newcomer's pushes come from whoever watches for newcomers). Returns (peers in our
        view, pushes taken this step); (0, 0) without peer sampling."""
        if self.gossip is None:
            return 0, 0
        known = self.ledger.known.items()
        self.gossip.drop([s for s, state in known if self.ledger.shunned(state.announcement.peer_id)])
        self.gossip.end_round(take_pushes=len(self.ledger.vouched(self.transport.now())) >= 2)
        heard, self._heard = self.gossip.heard - self._heard, self.gossip.heard
        return self.gossip.size(), heard

    def keep_view(self, reject: Reject) -> None:
        """One round of peer sampling without gathering groups, for a peer that serves and does not train (a
        benchmark's publishers): the view pulls started last round are taken, the view renewed, the next pulls
        and pushes started."""
        self._collect_views(reject)
        self.end()
        self._start_gossip()
