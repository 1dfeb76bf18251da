"""Peer sampling on the real path (docs/PROTOCOL.md section 7): each step a peer serves a sample of its view
and pulls the samples of PULL_FANOUT other peers, established senders first; membership.py keeps the view.

What travels is a "view" bundle (protocol/view.py): announcements each signed by its owner, the server's own
first (its "ann" bundle's signature), so an entry passed on cannot be altered and a peer learns, with every
view it pulls, the newest announcement of the peer it pulled from. Every entry is checked as an announcement
read from the DHT (signature against its identity, then the exchange's checks: decoding, tokenizer, age) before
it enters the view. View pulls run beside the step: nothing waits for them; one not answered within
VIEW_PULL_TIMEOUT, or refused, is a miss, and the peer leaves our view at once (silent peers are never waited
on and stop being handed out).

Pushes: each step a peer sends a "hello" to PUSH_FANOUT members of its view (a newcomer, to NEWCOMER_PUSH_FANOUT
of the senders it read in the DHT or its initial peers' views): a request that carries nothing but asks the
receiver to pull our view. The receiver takes the pushes of a step only if they come from at most PUSH_LIMIT
peers (else none: a flood), pulls each pusher's view over the connection it opened, and takes its first entry
only if it is the pusher's own (signature, checks, and the announcement names the peer id that pushed). So a
newcomer is known to a few peers at their next step, without waiting for their directory reads, and a push costs
the pusher a connection, not us a free entry.

Seeds: while our view is empty, we also pull the views of two seeds: peers of our DHT routing table first,
our initial peers (a bootstrap keeps a view: node/swarm/seeding.py) once a seed missed. Their entries are checked
like any others (so a seed cannot forge one, only choose which to hand out) and fill the empty view at once
(`Membership.seed`): a newcomer's first step learns up to MAX_VIEW_ENTRIES senders without reading the whole
directory, and newcomers' first pulls spread over the swarm instead of all landing on the bootstrap. A newcomer
whose view filled but no sender of which brought it informative groups after its first step (its neighbours
answered with identities whose groups teach nothing: Sybils) is *stranded*: it asks, once each, the seeds it has
not asked yet (its initial peers), whose entries fill the free places of its view.

Refill: a view that drains below pull_peers (its entries expired or went silent together: in a large swarm, now
and then) takes the entries we hold of our established senders (`refill`), as a passive view refills an active
one, before the step decides whether to read the directory: they were checked when their views brought them.
"""
from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from protocol.codec import Announcement, RecordError, bundle_digest
from protocol.view import MAX_VIEW_BYTES, MAX_VIEW_ENTRIES, SignedAnnouncement, pack_view, unpack_view

from . import SwarmTransport, finished
from .freshness import Freshness
from .membership import PULL_FANOUT, PUSH_FANOUT, Entry, Membership

VIEW_PULL_TIMEOUT = 5.0  # seconds a view pull may take (the step never waits for it)
HELD = 256  # peers whose own signed announcement we keep (to vouch for them)
SEED_RETRY = 10  # steps after every seed's view brought nothing before we ask them again (while our view is empty)


@dataclass(frozen=True)
class Held:
    """What a view entry carries on the real path: the signed bytes (handed on as they are) and their meaning."""

    signed: SignedAnnouncement
    announcement: Announcement | None  # None for our own (never decoded here)


class Gossip:
    def __init__(self, transport: SwarmTransport, rng: random.Random, freshness: Freshness,
                 options: dict | None = None):
        """options: the view's (Membership's keyword arguments; a benchmark's control turns its defences off)."""
        self.transport, self.freshness = transport, freshness
        self.membership = Membership(transport.own_subkey, rng, **(options or {}))
        self.pulls: dict[bytes, Future] = {}  # identity -> its view pull in flight
        self.pushed: dict[str, Future] = {}  # peer id that pushed to us -> the pull of its view in flight
        self.held: OrderedDict[bytes, Entry] = OrderedDict()  # identity -> its own entry, as its view brought it
        self.pulled = self.missed = 0  # view pulls answered, and not (in all)
        self.busy = 0  # view pulls answered "busy" (served as often as a view is: no miss)
        self.heard = self.flooded = 0  # pushes taken (their view pulled), and steps whose pushes were all dropped
        self.seeding: dict[str, Future] = {}  # seed's peer id -> the pull of its view in flight
        self.seeded = 0  # entries our seeds' views brought (in all)
        self.seed_failed = False  # the last answer of a seed brought no entry (or none came)
        self.seeds_missed: set[str] = set()  # seeds whose view brought nothing since we last started over
        self._seed_wait = 0  # steps before we may ask the seeds again
        self.seeds_asked: set[str] = set()  # seeds whose view we pulled (a stranded peer asks each other one once)

    def serve(self, value: bytes, created: float, vouched: list[bytes]) -> None:
        """Serves our announcement `value` (kind "ann", signed) and a sample of our view, ours first, then the
        entries we hold of `vouched` (senders whose groups proved valid and informative here)."""
        digest = self.transport.serve("ann", value)
        own = SignedAnnouncement(self.transport.own_subkey, value, self.transport.signature("ann", digest))
        now = self.transport.now()
        held = [self.held[s] for s in vouched if s in self.held]
        sample = self.membership.sample(MAX_VIEW_ENTRIES, now, Entry(own.subkey, created, now + self.freshness.max_age,
                                                                      Held(own, None)), held)
        self.transport.serve("view", pack_view([e.payload.signed for e in sample]))

    def start(self, prefer: list[bytes], route: Callable[[bytes], tuple[str, str, tuple[str, ...]] | None]) -> None:
        """Starts pulling the view samples of up to PULL_FANOUT peers (of `prefer` first, then our view), not
        more than that in flight; route(identity) -> (peer id, relay, addresses), or None when unknown."""
        now = self.transport.now()
        free = PULL_FANOUT - len(self.pulls)
        for target in self.membership.targets(free, now, [p for p in prefer if p not in self.pulls]):
            if target in self.pulls:
                continue
            where = route(target)
            if where is None:
                continue
            peer_id, via, maddrs = where
            try:
                self.pulls[target] = self.transport.pull_async(peer_id, "view", b"", MAX_VIEW_BYTES,
                                                               timeout=VIEW_PULL_TIMEOUT, maddrs=maddrs,
                                                               signer=target, via=via)
            except (OSError, RuntimeError, ValueError):
                self.membership.missed(target)

    def push(self, prefer: list[bytes], route: Callable[[bytes], tuple[str, str, tuple[str, ...]] | None],
             fanout: int = PUSH_FANOUT) -> None:
        """Pushes to `fanout` peers (of `prefer` first, then our view): asks each to pull our view, our own
        announcement first (how a newcomer becomes known without waiting for the others' directory reads)."""
        for target in self.membership.targets(fanout, self.transport.now(), prefer):
            where = route(target)
            if where is not None and not where[1]:  # (not through relays: a push is only worth a direct dial)
                try:
                    self.transport.hello_async(where[0], where[2])
                except (OSError, RuntimeError, ValueError):
                    self.membership.missed(target)

    def ask_seeds(self, stranded: bool = False) -> bool:
        """While our view is empty: pulls the views of the first PULL_FANOUT of the transport's seeds ((peer id,
        addresses): DHT neighbours, then our initial peers; asked for only then) whose view has not brought
        nothing yet, one pull each in flight; once every seed has, they are asked again SEED_RETRY steps later
        (the directory serves meanwhile). While `stranded` (the caller's judgement: a newcomer past its first
        step that no sender has helped yet), the seeds not asked yet, once each. Returns whether their answer can
        spare us the directory: a pull is in flight, or the last answer brought entries."""
        self._seed_wait -= 1
        if stranded and self.size() > 0:
            untried = [(p, m) for p, m in self.transport.seeds() if p not in self.seeds_asked]
            self._ask(untried[:PULL_FANOUT])
        elif self.size() == 0 and self._seed_wait <= 0:
            untried = [(p, m) for p, m in self.transport.seeds() if p not in self.seeds_missed]
            if not untried and not self.seeding:  # every seed missed: start over later
                self.seeds_missed.clear()
                self._seed_wait = SEED_RETRY
            self._ask(untried[:PULL_FANOUT])
        return not self.seed_failed and (bool(self.seeding) or self.seeded > 0)

    def _ask(self, seeds: list[tuple[str, tuple[str, ...]]]) -> None:
        """Pulls these seeds' views (one pull each in flight)."""
        for peer_id, maddrs in seeds:
            if peer_id in self.seeding:
                continue
            self.seeds_asked.add(peer_id)
            if len(self.seeds_asked) > 64:  # (bounded, as seeds_missed)
                self.seeds_asked = {peer_id}
            try:
                self.seeding[peer_id] = self.transport.pull_async(peer_id, "view", b"", MAX_VIEW_BYTES,
                                                                  timeout=VIEW_PULL_TIMEOUT, maddrs=maddrs)
            except (OSError, RuntimeError, ValueError):
                self._seed_answer(peer_id, 0)

    def _seed_answer(self, peer_id: str, entries: int) -> None:
        """A seed answered with `entries` valid entries (0: none, or no answer): it is not asked again until
        every seed has missed."""
        self.seeded += entries
        self.seed_failed = entries == 0
        if self.seed_failed:
            self.seeds_missed.add(peer_id)
            if len(self.seeds_missed) > 64:  # (bounded: neighbours are drawn again when they leave the table)
                self.seeds_missed.clear()

    def hear(self) -> None:
        """Takes the pushes made to us since the last step: more than the push limit's peers, and none is taken (a
        flood); else each pusher's view is pulled (over the connection it opened), its own entry to be taken."""
        pushers = [p for p in dict.fromkeys(self.transport.take_hellos()) if p not in self.pushed]
        if len(pushers) > self.membership.push_limit:
            self.flooded += 1
            return
        for peer_id in pushers:
            try:
                self.pushed[peer_id] = self.transport.pull_async(peer_id, "view", b"", MAX_VIEW_BYTES,
                                                                 timeout=VIEW_PULL_TIMEOUT)
            except (OSError, RuntimeError, ValueError):
                continue

    def collect(self, check: Callable[[bytes, bytes], Announcement | None],
                reject: Callable[[bytes, str, str], None]) -> None:
        """Takes the finished view pulls into this step's pulled entries: each entry's signature checked here,
        then check(subkey, value), the exchange's checks of an announcement (None: refused, counted there, or
        stale); reject(sender, reason, detail) for a view or entry refused here. A pull that failed is a miss."""
        entries = []
        for target, future in finished(self.pulls):
            try:
                items = unpack_view(future.result())
            except Exception as err:  # noqa: BLE001 (gone, silent or unreachable: a miss, never our problem)
                if isinstance(err, RecordError) and err.reason == "busy":  # alive, asked by many: no miss
                    self.busy += 1
                    continue
                if isinstance(err, RecordError) and err.reason != "missing":  # it broke the protocol (one not
                    reject(target, err.reason, f"view: {err}")  #                serving views yet: a miss only)
                self.membership.missed(target)
                self.held.pop(target, None)  # (neither vouched for in our view nor refilled until it answers)
                self.missed += 1
                continue
            self.pulled += 1
            for entry in self._entries(items, check, lambda subkey, target=target: reject(
                    target, "signature", "a view entry whose signature does not hold")):
                entries.append(entry)
                if entry.subkey == target:  # the peer's own, newest announcement: what we hand on if we vouch
                    self.held[target] = entry
                    self.held.move_to_end(target)
                    while len(self.held) > HELD:
                        self.held.popitem(last=False)
        self.membership.pull(entries)
        for peer_id, future in finished(self.seeding):  # our seeds': their entries fill our view at once
            try:
                items = unpack_view(future.result())
            except Exception:  # noqa: BLE001 (no view there: an older bootstrap, or gone; the directory serves)
                self._seed_answer(peer_id, 0)
                continue
            seeded = self._entries(items, check, lambda subkey, peer_id=peer_id: reject(
                subkey, "signature", f"a view entry from seed {peer_id} whose signature does not hold"))
            self.membership.seed(seeded)
            self._seed_answer(peer_id, len(seeded))
        for peer_id, future in finished(self.pushed):
            try:
                own = unpack_view(future.result())[:1]
            except Exception:  # noqa: BLE001 (a pusher that does not answer, or answers garbage: nothing taken)
                continue
            for entry in self._entries(own, check, lambda subkey: None):
                if entry.payload.announcement.peer_id == peer_id:  # its own, and no one else's
                    self.heard += 1
                    self.membership.push(entry)

    def _entries(self, items: list[SignedAnnouncement], check: Callable[[bytes, bytes], Announcement | None],
                 forged: Callable[[bytes], None]) -> list[Entry]:
        """The view entries of `items` (not ours) whose owner's signature holds (else forged(subkey)) and whose
        announcement passes check."""
        entries = []
        for signed in items:
            if signed.subkey == self.transport.own_subkey:
                continue
            if not self.transport.verify("ann", bundle_digest(signed.value), signed.signature, signed.subkey):
                forged(signed.subkey)
                continue
            announcement = check(signed.subkey, signed.value)
            if announcement is not None:
                entries.append(Entry(signed.subkey, announcement.created, announcement.created + self.freshness.max_age,
                                     Held(signed, announcement)))
        return entries

    def refill(self, vouched: list[bytes], want: int) -> int:
        """While our view holds fewer than `want` peers: fills its free places with the entries we hold of
        `vouched` identities (their own announcements as their views brought them, checked then, unexpired), as a
        passive view refills an active one; costs no check and no read. Returns how many were added. (A view
        drains now and then in a large swarm, when most of its entries expire or go silent at once: measured in
        bench/sim/discovery.py at 10,000 peers, about 0.1% of established peers a round, each then re-reading about
        16 announcements from the directory, the busiest peers' extra checks.)"""
        now = self.transport.now()
        if self.size() >= want:
            return 0
        return self.membership.seed([self.held[s] for s in vouched if s in self.held and self.held[s].expires > now])

    def drop(self, subkeys) -> None:
        """Takes these identities out of our view and samplers (senders the ledger has distrusted or demoted:
        left in, identities that behaved until they were established kept a peer's view full of themselves after
        they were distrusted, so that it read no directory and took no push, and lost its honest partners)."""
        for subkey in subkeys:
            if subkey in self.membership.view:
                self.membership.missed(subkey)
            self.held.pop(subkey, None)

    def end_round(self, take_pushes: bool) -> None:
        """Renews the view from this step's pulls and, with take_pushes (we have established senders: a
        newcomer's pushes come from whoever watches for newcomers), its pushes."""
        self.membership.end_round(self.transport.now(), take_pushes=take_pushes)

    def size(self) -> int:
        return len(self.membership.members(self.transport.now()))
