"""Bundles pulled from senders, peer to peer (docs/PROTOCOL.md section 3): which pulls are in flight, how each is
routed, and what has finished.

Each chosen sender is pulled twice, its latest groups bundle and its latest summaries bundle, each under its own
size limit, the owner's signature checked by the transport; at most `pull_peers` senders are in flight at once,
chosen by senders.py. A sender that names relays (it cannot accept connections) is pulled through one of them,
at the relay's addresses if we know them, or directly when we are its relay. Senders we pulled from directly are
remembered (the latest MAX_RELAYS): in client mode they are the relays we announce. What a finished pull
brought, or why it failed, is the exchange's to judge (exchange.py); nothing here reads a bundle.
"""
from __future__ import annotations

import collections
import logging
import random
from concurrent.futures import Future

from node.errors import first_line
from protocol.codec import MAX_RELAYS, Announcement

from . import SwarmTransport, finished
from .senders import SenderLedger

log = logging.getLogger(__name__)
PULL_TIMEOUT = 30.0  # seconds a pull may take before it is abandoned (a step waits at most its deadline)


class Pulls:
    def __init__(self, transport: SwarmTransport, senders: SenderLedger, rng: random.Random,
                 limits: dict[str, int]):
        """limits: the largest bundle of each kind we pull ("groups", "summaries"), in bytes."""
        self.transport, self.senders, self.rng, self.limits = transport, senders, rng, limits
        self.inflight: dict[tuple[bytes, str], Future] = {}  # (sender, kind) -> its pull
        self.reachable: collections.OrderedDict[str, None] = collections.OrderedDict()  # peer ids we pulled
        #                                                  from directly, latest last (our relays in client mode)

    def __bool__(self) -> bool:
        return bool(self.inflight)

    def start(self, step: int, pull_peers: int, explore: int) -> None:
        """Starts pulling the latest bundles of newly chosen senders, up to `pull_peers` senders in flight."""
        busy = {sender for sender, _ in self.inflight}
        free = pull_peers - len(busy)
        if free <= 0:
            return
        for sender in self.senders.choose(self.transport.now(), step, free, busy, explore):
            announcement = self.senders.known[sender].announcement
            via, maddrs = self.route(announcement)
            for kind, limit in self.limits.items():
                try:
                    pull = self.transport.pull_async(announcement.peer_id, kind, b"", limit, timeout=PULL_TIMEOUT,
                                                     maddrs=maddrs, signer=sender, via=via)
                    pull.add_done_callback(self._stamp)
                    self.inflight[sender, kind] = pull
                except (OSError, RuntimeError, ValueError) as err:
                    log.warning("pulling from %s failed to start: %s", announcement.peer_id, first_line(err))

    def _stamp(self, pull: Future) -> None:
        """Notes when a pull finished (our clock): its groups' age is judged then, not when a step gets to them
        (a peer that prefetches while it generates may take minutes to)."""
        pull.arrived = self.transport.now()

    def route(self, announcement: Announcement) -> tuple[str, tuple[str, ...]]:
        """(relay, addresses) to pull a sender's bundles: directly at its announced addresses, or, when it
        names relays (it cannot accept connections), through one of them (at the relay's addresses if we know
        them; directly if we are its relay, over the connection it opened to us)."""
        if not announcement.relays or self.transport.peer_id in announcement.relays:
            return "", announcement.maddrs
        via = self.rng.choice(announcement.relays)
        known = [s.announcement.maddrs for s in self.senders.known.values() if s.announcement.peer_id == via]
        return via, known[0] if known else ()

    def finished(self) -> list[tuple[bytes, str, bytes | BaseException, float]]:
        """The pulls that have finished since the last call: (sender, kind, its bundle or the error, when it
        arrived)."""
        done = []
        for (sender, kind), future in finished(self.inflight):
            arrived = getattr(future, "arrived", None) or self.transport.now()
            try:
                done.append((sender, kind, future.result(), arrived))
            except Exception as err:  # noqa: BLE001 (a failed pull is the sender's problem, never ours)
                done.append((sender, kind, err, arrived))
                continue
            state = self.senders.known.get(sender)
            if state is not None and not state.announcement.relays:
                self.reachable[state.announcement.peer_id] = None
                self.reachable.move_to_end(state.announcement.peer_id)
                while len(self.reachable) > MAX_RELAYS:
                    self.reachable.popitem(last=False)
        return done

    def established_pending(self) -> bool:
        """Whether a pull of an established sender (not a newcomer) is still on its way."""
        return any(not self.senders.is_newcomer(s) for s, _ in self.inflight)

    def newcomer_pending(self) -> bool:
        return any(self.senders.is_newcomer(s) for s, _ in self.inflight)

    def relays(self) -> tuple[str, ...]:
        """The last peers we pulled from directly, latest first (reachable, and holding a connection we opened)."""
        return tuple(reversed(self.reachable))[:MAX_RELAYS]

    def cancel(self) -> None:
        for future in self.inflight.values():
            future.cancel()
