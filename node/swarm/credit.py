"""Credit, both ways: the groups of each peer we trained on (announced as `credits`, and signed, one receipt per
generator and step: receipts.py), and what other peers say, and sign, they trained on of ours.

An announcement's credits are a claim (a peer cannot credit itself, and no claim counts above what we published);
the signed receipts behind it are pulled and checked (receipts.py), and only those are kept as proof.
"""
from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path

from node.generation.rollouts import Received
from protocol.codec import MAX_CREDITS, Announcement, BundleRef

from . import SwarmTransport
from .bounded import remember
from .receipts import Receipts

CREDIT_MEMORY = 4096  # peers remembered for the credit they gave us, and for the credit we give


class Credit:
    def __init__(self, transport: SwarmTransport, task: str, receipts_file: Path | None,
                 route: Callable[[Announcement], tuple[str, tuple[str, ...]]]):
        """task: the task's name (receipts name it); receipts_file: where the signed receipts naming us are kept
        (None: nowhere); route(announcement) -> (relay, addresses) of a pull of its receipts."""
        self.transport, self.route = transport, route
        self.published = 0  # own groups published in all (no one can credit us with more)
        self.given: collections.OrderedDict[str, int] = collections.OrderedDict()  # sender peer id -> its groups
        #                                  we trained on in all, the most recently used last (announced: credits)
        self.credited: collections.OrderedDict[str, int] = collections.OrderedDict()  # peer id -> our groups it
        #                                  says it trained on (its latest announcement; kept after it leaves)
        self.receipts = Receipts(transport, task, receipts_file)
        self.ref: BundleRef | None = None  # our receipts bundle's, as last served

    def credits(self) -> tuple[tuple[str, int], ...]:
        """What we announce we trained on: the peers we used most recently, with their groups in all."""
        return tuple(self.given.items())[-MAX_CREDITS:]

    def serve(self, now: float) -> BundleRef | None:
        """Signs the receipts of the groups the last step trained on and serves the newest as one bundle; returns
        its reference (the last one while nothing new was signed)."""
        bundle = self.receipts.issue(now)
        if bundle is not None:
            self.ref = BundleRef(self.transport.serve("receipts", bundle), len(bundle), len(self.receipts.served))
        return self.ref

    def read(self, sender: bytes, announcement: Announcement) -> None:
        """What an announcement says it trained on of ours; its receipts bundle is then pulled, and the signed
        receipts naming us are checked and kept (receipts.py)."""
        mine = [n for peer_id, n in announcement.credits if peer_id == self.transport.peer_id]
        if mine and announcement.peer_id != self.transport.peer_id:
            peer_id = announcement.peer_id
            remember(self.credited, peer_id, max(mine[0], self.credited.get(peer_id, 0)), CREDIT_MEMORY)
            if announcement.receipts is not None:
                self.receipts.want(sender, peer_id, announcement.receipts.digest, self.route(announcement))

    def trained_on(self, received: list[Received], step: int, peer_id_of: Callable[[bytes], str]) -> None:
        """Notes the received groups this step trains on (after any gate): announced with our next groups, and
        signed, one receipt per generator."""
        for r in received:
            peer_id = peer_id_of(r.sender)
            if peer_id:
                remember(self.given, peer_id, self.given.get(peer_id, 0) + 1, CREDIT_MEMORY)
                self.receipts.used(peer_id, r.group.item.ref.index, r.created, len(r.group.completions), step)

    def claimed(self) -> tuple[int, int]:
        """(our groups other peers say they trained on, how many peers say so): each peer's latest figure, at
        most what we published (a claim cannot exceed it), summed."""
        return sum(min(n, self.published) for n in self.credited.values()), len(self.credited)
