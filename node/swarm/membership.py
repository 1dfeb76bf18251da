"""Who a peer knows: a small view of other peers' announcements, refreshed by gossip (peer sampling).

A peer does not read the whole directory. It keeps a *view* of at most `view_size` entries (one per identity,
the newest announcement of each) and renews it once a round (a training step) from three sources, in the manner
of Brahms (Bortnikov et al., "Brahms: Byzantine resilient random membership sampling", 2009):

- *pushed*: announcements other peers sent us unasked this round (each peer pushes its own to a few members of
  its view). Identities cost nothing, so pushes are what an attacker floods: a round with more than
  `push_limit` pushes keeps none of them and renews nothing (what it teaches the samplers is kept: see below).
- *pulled*: announcements we asked a few members of our view for (a sample of their views) this round.
- *sampled*: the entries of `samplers` min-wise samplers. Each sampler has its own secret key and keeps, of
  every identity offered to it (pulled or seeded, ever), the one whose keyed hash is smallest. Its pick is a
  uniform draw over the identities seen, however often each was offered: an attacker's share of the samplers is
  its share of identities, not of messages. Unlike Brahms, pushes are not offered to the samplers: the pushed
  stream is the one an attacker fills at will (it knows every peer and pushes to each as much as the limit lets
  through), while pulled entries come from peers we chose to ask, established senders first, who hand out what
  helped them first (`sample`). Measured in bench/sim/discovery.py at 1,000 peers with 10% Sybil identities
  pushing 2 a round to every peer: the samplers' Sybil share 0.29 when fed pushes too, 0.01 without.

The renewed view is up to `push_slots` pushed, `pull_slots` pulled and `sample_slots` sampled entries (each part
drawn at random from its source), topped up from the old view to `view_size`. An entry leaves when its
announcement expires (our clock), when the peer misses a request of ours (`missed`: silent peers are evicted at
once and never handed out, and a sampler holding one starts afresh), or when renewal pushes it out.

Everything here is pure bookkeeping on entries the caller has validated already (decoded, signature, age,
tokenizer: the exchange's trust boundary); it never touches the network, so a simulation runs the same code
(bench/sim/discovery.py).
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

VIEW_SIZE = 24  # entries a view holds
SAMPLERS = 16  # min-wise samplers
PUSH_SLOTS, PULL_SLOTS, SAMPLE_SLOTS = 8, 8, 8  # what each source may contribute to a renewed view
PUSH_LIMIT = 3  # pushes a round may bring before the round's pushes are all discarded (flood)
PUSH_FANOUT = 1  # members of our view we push our own announcement to, each round
NEWCOMER_PUSH_FANOUT = 3  # the same while no sender is established here (a newcomer: it must become known;
#                           each receiver still gets one push from it, so the receivers' limit is unchanged)
PULL_FANOUT = 2  # members of our view we ask for a sample of theirs, each round
SAMPLE_SIZE = 8  # entries a peer hands out when asked for a sample of its view (its own included)


@dataclass
class Entry:
    """One identity's announcement as a view holds it. `payload` is opaque here (the exchange keeps the signed
    announcement; the simulation what it needs)."""

    subkey: bytes  # the owner's identity (its DHT subkey: its public key)
    created: float  # the announcement's time (the owner's clock: only compared between its own announcements)
    expires: float  # our clock: the entry is dropped then
    payload: object = None


def newer(a: Entry | None, b: Entry) -> Entry:
    """Of two entries for one identity, the newer announcement (b when a is None)."""
    return b if a is None or b.created > a.created else a


class Sampler:
    """Keeps, of all identities offered to it, the one with the smallest hash under its own secret key."""

    def __init__(self, key: bytes):
        self.key = key
        self.entry: Entry | None = None
        self._hash = b""

    def rank(self, subkey: bytes) -> bytes:
        return hashlib.blake2b(subkey, digest_size=8, key=self.key).digest()

    def offer(self, entry: Entry, rank: bytes | None = None) -> None:
        """Offers an identity (rank: its hash under this sampler's key, if computed already)."""
        if self.entry is not None and entry.subkey == self.entry.subkey:
            self.entry = newer(self.entry, entry)
            return
        rank = self.rank(entry.subkey) if rank is None else rank
        if self.entry is None or rank < self._hash:
            self.entry, self._hash = entry, rank

    def reset(self) -> None:
        self.entry, self._hash = None, b""


@dataclass
class RoundReport:
    """What one renewal did (the simulation and the node's logs count these)."""

    pushes: int = 0  # pushes received this round
    flooded: bool = False  # more than push_limit: none kept, view not renewed
    renewed: bool = False
    view: int = 0  # entries after renewal
    evicted: int = 0  # entries dropped this round because they expired
    new: int = 0  # identities in the view now that were not before


@dataclass
class Membership:
    """One peer's view, samplers and this round's pushed and pulled announcements."""

    own: bytes  # our identity (never in our own view)
    rng: random.Random
    view_size: int = VIEW_SIZE
    samplers: int = SAMPLERS
    push_slots: int = PUSH_SLOTS
    pull_slots: int = PULL_SLOTS
    sample_slots: int = SAMPLE_SLOTS
    push_limit: int = PUSH_LIMIT
    view: dict[bytes, Entry] = field(default_factory=dict)
    pushed: dict[bytes, Entry] = field(default_factory=dict)
    pulled: dict[bytes, Entry] = field(default_factory=dict)
    pushes: int = 0
    _samplers: list[Sampler] = field(default_factory=list)

    def __post_init__(self):
        self._samplers = [Sampler(self.rng.randbytes(16)) for _ in range(self.samplers)]

    # ---- what arrives --------------------------------------------------------------------------------------
    def push(self, entry: Entry) -> None:
        """An announcement a peer sent us unasked (validated by the caller)."""
        self.pushes += 1
        if entry.subkey != self.own:
            self.pushed[entry.subkey] = newer(self.pushed.get(entry.subkey), entry)

    def pull(self, entries) -> None:
        """Announcements we asked for (a sample of another peer's view, validated by the caller)."""
        for entry in entries:
            if entry.subkey != self.own:
                self.pulled[entry.subkey] = newer(self.pulled.get(entry.subkey), entry)

    def seed(self, entries) -> int:
        """Fills free places of the view directly (a newcomer's first announcements, from the DHT or the
        bootstrap, or a view that emptied), feeding the samplers too; returns how many entries were added."""
        added = 0
        for entry in entries:
            if entry.subkey == self.own:
                continue
            self._offer(entry)
            if entry.subkey in self.view:
                self.view[entry.subkey] = newer(self.view[entry.subkey], entry)
            elif len(self.view) < self.view_size:
                self.view[entry.subkey] = entry
                added += 1
        return added

    def missed(self, subkey: bytes) -> None:
        """A peer did not answer a request of ours in time (silent, gone, or unreachable): it leaves the view at
        once and any sampler holding it starts afresh (fed again from the view and what comes next)."""
        self.view.pop(subkey, None)
        for sampler in self._samplers:
            if sampler.entry is not None and sampler.entry.subkey == subkey:
                sampler.reset()
                for entry in self.view.values():
                    sampler.offer(entry)

    # ---- the round ------------------------------------------------------------------------------------------
    def end_round(self, now: float, take_pushes: bool = True) -> RoundReport:
        """Renews the view from this round's pushes, pulls and the samplers (module docstring), drops expired
        entries, and starts the next round. take_pushes=False: this round's pushes renew nothing and teach the
        samplers nothing (a newcomer's: no honest peer knows it yet, so what it is pushed comes from whoever
        watches for newcomers)."""
        if not take_pushes:
            self.pushed, self.pushes = {}, 0
        report = RoundReport(pushes=self.pushes)
        for entry in self.pulled.values():
            self._offer(entry)
        for sampler in self._samplers:
            if sampler.entry is not None and sampler.entry.expires <= now:
                sampler.reset()
        before = set(self.view)
        live = {k: e for k, e in self.view.items() if e.expires > now}
        report.evicted = len(self.view) - len(live)
        self.view = live
        report.flooded = self.pushes > self.push_limit
        if not report.flooded and (self.pushed or self.pulled):
            self.view = self._renewed(now)
            report.renewed = True
        self.pushed, self.pulled, self.pushes = {}, {}, 0
        report.view = len(self.view)
        report.new = len(set(self.view) - before)
        return report

    def _renewed(self, now: float) -> dict[bytes, Entry]:
        sampled = {}
        for sampler in self._samplers:
            if sampler.entry is not None and sampler.entry.expires > now:
                sampled[sampler.entry.subkey] = sampler.entry
        view: dict[bytes, Entry] = {}
        for source, slots in ((self.pushed, self.push_slots), (self.pulled, self.pull_slots),
                              (sampled, self.sample_slots)):
            fresh = [e for e in source.values() if e.expires > now and e.subkey not in view]
            for entry in self.rng.sample(fresh, min(slots, len(fresh))):
                view[entry.subkey] = newer(self.view.get(entry.subkey), entry)
        old = [e for k, e in self.view.items() if k not in view]
        self.rng.shuffle(old)
        for entry in old[:max(self.view_size - len(view), 0)]:
            view[entry.subkey] = entry
        return dict(list(view.items())[:self.view_size])

    def _offer(self, entry: Entry) -> None:
        for sampler in self._samplers:
            sampler.offer(entry)

    # ---- what we hand out and whom we ask -------------------------------------------------------------------
    def sample(self, k: int, now: float, own: Entry | None = None, vouched=()) -> list[Entry]:
        """Up to k entries to answer a pull: our own announcement first (if given), then entries we vouch for
        (the caller's choice: senders whose groups proved valid and informative here) up to half of k, then
        the samplers' picks, then other view members, each part at random. What has helped us, and the samplers' uniform
        draw over identities, go first, so identities that only push do not spread through honest answers."""
        picked = [own] if own is not None else []
        taken = {e.subkey for e in picked}
        for pool, share in ((vouched, k // 2), (self.sampled(), k), (self.view.values(), k)):
            live = [e for e in pool if e.expires > now and e.subkey not in taken]
            for entry in self.rng.sample(live, min(len(live), share - len(picked), k - len(picked))):
                picked.append(entry)
                taken.add(entry.subkey)
        return picked

    def targets(self, k: int, now: float, prefer=()) -> list[bytes]:
        """Up to k identities to push to or pull from this round: of `prefer` (the caller's, e.g. established
        senders) first, then live view members, each part at random."""
        live = [s for s, e in self.view.items() if e.expires > now]
        first = [s for s in dict.fromkeys(prefer) if s != self.own]
        chosen = self.rng.sample(first, min(len(first), k))
        rest = [s for s in live if s not in set(chosen)]
        return chosen + self.rng.sample(rest, min(len(rest), k - len(chosen)))

    def members(self, now: float) -> list[Entry]:
        return [e for e in self.view.values() if e.expires > now]

    def sampled(self) -> list[Entry]:
        """The samplers' current picks (for tests and the simulation's Sybil share)."""
        return [s.entry for s in self._samplers if s.entry is not None]
