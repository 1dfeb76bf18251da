"""Which received record a gather looks at next (exchange.py): each pulled groups bundle new to us becomes its
sender's queue, and records are taken round-robin across senders, in a random order each step, one from each in
turn, under per-sender and per-step caps.

Established senders go first, leaving newcomers (while any is pulled) their share of the budget
(explore_pulls / pull_peers); newcomers only once no established sender's pull is still on its way, together at
most `explore_pulls` x the per-sender cap (identities cost nothing: senders.py); then established senders again,
up to the whole budget. A record handled before (used or refused) is skipped for the cost of a hash. What a
record is worth is the caller's to decide (`handle`: the trust boundary, then use); nothing here decodes one.
"""
from __future__ import annotations

import collections
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from protocol.codec import bundle_digest

from .bounded import BoundedSet


@dataclass
class Queue:
    """The records of one sender's current bundle not yet looked at this step."""

    bundle: bytes  # digest of the bundle
    records: collections.deque
    arrived: float = 0.0  # when its pull finished (our clock)


class RoundRobin:
    def __init__(self, rng: random.Random, seen: BoundedSet, done_bundles: BoundedSet):
        """seen: digests of records handled before; done_bundles: digests of bundles whose every record was."""
        self.rng, self.seen, self.done_bundles = rng, seen, done_bundles
        self.queues: dict[bytes, Queue] = {}
        self.taken: collections.Counter = collections.Counter()  # sender -> completions accepted this step

    def add(self, sender: bytes, bundle: bytes, records: list[bytes], arrived: float = 0.0) -> None:
        """A sender's bundle (digest `bundle`) of records, pulled at `arrived`; an empty one is done at once."""
        if not records:
            self.done_bundles.add(bundle)
            return
        self.queues[sender] = Queue(bundle, collections.deque(records), arrived)

    def arrived(self, sender: bytes) -> float:
        """When the sender's current bundle arrived (0: no bundle of it queued)."""
        queue = self.queues.get(sender)
        return queue.arrived if queue is not None else 0.0

    def take(self, budget: int, sender_cap: int, explore: int, pull_peers: int,
             is_newcomer: Callable[[bytes], bool], newcomer_pending: bool, newcomers_too: bool,
             full: Callable[[int], bool], handle: Callable[[bytes, bytes], None]) -> None:
        """Offers records to handle(sender, raw) in the module's order until full(limit) (the caller's budget of
        groups, or its work budget, is spent) or no sender under its cap has records left. `taken` must be
        updated by `handle` (completions accepted per sender)."""
        newcomers = {s for s in self.queues if is_newcomer(s)}
        established = [s for s in self.queues if s not in newcomers]
        self.rng.shuffle(established)
        reserve = math.ceil(budget * explore / pull_peers) if newcomers or newcomer_pending else 0
        self._round_robin(established, budget - reserve, sender_cap, None, full, handle)
        if newcomers_too:
            order = sorted(newcomers)
            self.rng.shuffle(order)
            self._round_robin(order, budget, sender_cap, explore * sender_cap, full, handle)
            self._round_robin(established, budget, sender_cap, None, full, handle)

    def _round_robin(self, order: list[bytes], limit: int, sender_cap: int, together_cap: int | None,
                     full: Callable[[int], bool], handle: Callable[[bytes, bytes], None]) -> None:
        """One record from each sender of `order` in turn (each under sender_cap, all of them together under
        together_cap completions if given) until full(limit) or nothing is left."""
        while not full(limit):
            progressed = False
            for sender in order:
                if self.taken[sender] >= sender_cap or (
                        together_cap is not None and sum(self.taken[s] for s in order) >= together_cap):
                    continue
                raw = self._next_new(self.queues[sender])
                if raw is None:
                    continue
                progressed = True
                handle(sender, raw)
                if full(limit):
                    return
            if not progressed:
                return

    def _next_new(self, queue: Queue) -> bytes | None:
        """The sender's next record not handled before (those are skipped for the cost of a hash: this very
        record was used or rejected already and is not counted again), or None when none is left."""
        while queue.records:
            raw = queue.records.popleft()
            if not queue.records:
                self.done_bundles.add(queue.bundle)
            if self.seen.add(bundle_digest(raw)):
                return raw
        return None
