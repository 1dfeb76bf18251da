"""Relaying pulls for peers behind NAT (docs/PROTOCOL.md section 3, "Relays"), bounded so that stalling owners
cannot hold the relay (issue 54, 2).

A part of `SwarmDHT` (node/swarm/dht.py), kept apart by concern; what it needs of the DHT library comes through
the host's `_peer_ref`. A peer in client mode names up to 2 relays; a requester pulls its bundles through one of
them, and the relay passes the owner's chunks on unchanged: the receiver checks the owner's signature, so the
relay cannot alter them.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time

from node.errors import first_line
from node.swarm.streams import NOT_SERVED, bundle_handler
from protocol import PROTOCOL_VERSION
from protocol import swarm_pb2 as pb

log = logging.getLogger(__name__)

RELAY_STREAMS = 8  # pulls a reachable peer relays at once to peers behind NAT (more are answered "not served")
RELAY_BYTES = 4 << 20  # bytes one relayed pull may carry (a receiver's own limit is lower)
RELAY_TIMEOUT = 30.0  # seconds one relayed pull may take, as a whole (an owner that accepts and never answers too)
RELAY_PER_REQUESTER = 2  # relay slots one requester may hold at once (a client-mode peer names two relays)
RELAY_PER_OWNER = 2  # relay slots the pulls of one owner may hold at once (an owner that never answers cannot
#                      fill the relay, whoever asks for it)
RELAY_FIRST_CHUNK = 5.0  # seconds an owner has to start answering a relayed pull (honest owners: milliseconds)
RELAY_CHUNK = 5.0  # seconds an owner has for each next chunk of a relayed pull (issue 54, 2: after its first chunk
#                    a staller held a slot for RELAY_TIMEOUT, 8 identities every slot)
RELAY_MIN_RATE = 32 << 10  # bytes a second an owner's relayed chunks must average once RELAY_CHUNK has passed
#                            (a trickle of a byte a chunk holds no slot; a 3 MiB bundle needs 2 MB/s on loopback)
RELAY_STRANGER_SLOTS = 4  # of RELAY_STREAMS, the most the pulls of owners we have not yet seen serve a bundle whole
#                           through us may hold: the rest stay for owners that have (RELAY_PROVEN remembered)
RELAY_PROVEN = 1024
RELAY_SLACK = 64 << 10  # bytes a relayed pull may carry beyond twice the largest bundle its owner announced


class Relay:
    """Relaying (a part of SwarmDHT, which calls `_init_relay` and holds `intake`, `pacer`, `settings` and
    `_node`)."""

    def _init_relay(self) -> None:
        self._relays = asyncio.Semaphore(RELAY_STREAMS)
        self._relaying: collections.Counter = collections.Counter()  # requester -> relay slots it holds now
        self._relayed: collections.Counter = collections.Counter()  # owner -> relay slots its pulls hold now
        self.relay_owners: dict[str, int] | None = None  # peer ids we relay for, each with the largest bundle
        #                                                  it announced (None: any; the exchange sets it)
        self._proven: collections.OrderedDict[str, None] = collections.OrderedDict()  # owners whose bundles we
        #                                                  relayed whole, latest last (RELAY_STRANGER_SLOTS)
        self._strangers = 0  # relay slots held now by the pulls of owners not proven

    async def _relay(self, request, requester: str = ""):
        """Passes a pull on to `request.owner`, a peer that cannot accept connections but opened one to us
        (libp2p streams go both ways on it). Bounded so that stalling owners cannot hold the relay (issue 54, 2):
        at most RELAY_STREAMS pulls at once, RELAY_PER_REQUESTER for one requester, RELAY_PER_OWNER for one owner
        and RELAY_STRANGER_SLOTS for owners not yet proven (seen serving a bundle whole through us); each pull
        RELAY_TIMEOUT as a whole, RELAY_FIRST_CHUNK for the owner's first chunk and RELAY_CHUNK for each next one,
        RELAY_MIN_RATE on average once RELAY_CHUNK has passed, and no more bytes than the owner's first chunk
        declares nor than twice the largest bundle it announced (+ RELAY_SLACK); paced per owner by our own pacer
        (a pull whose turn is more than RELAY_FIRST_CHUNK away is refused, relay-rate). We check nothing else:
        the receiver checks the owner's signature and the digest, so we cannot alter it. With `relay_owners` set
        (a peer's exchange sets it each step), only for owners whose live announcement names us as their relay."""
        owner = request.owner
        if self.relay_owners is not None and owner not in self.relay_owners:
            self.intake.refused["relay-owner"] += 1  # not an owner whose live announcement names us
            yield NOT_SERVED
            return
        if self.settings.client_mode:
            yield NOT_SERVED
            return
        stranger = owner not in self._proven
        if (self._relays.locked() or self._relaying[requester] >= RELAY_PER_REQUESTER
                or self._relayed[owner] >= RELAY_PER_OWNER or (stranger and self._strangers >= RELAY_STRANGER_SLOTS)):
            self.intake.refused["relay-full"] += 1  # every slot, or this requester's, owner's or strangers' share
            yield NOT_SERVED
            return
        self._relaying[requester] += 1
        self._relayed[owner] += 1
        self._strangers += stranger
        try:
            async with self._relays:
                # the owner sees every pull we relay as ours: spaced under its intake's rate like our own pulls
                # of it (one bucket for both), and refused here when the wait would outlast its first chunk
                wait = self.pacer.delay(owner, most=RELAY_FIRST_CHUNK)
                if wait is None:
                    self.intake.refused["relay-rate"] += 1
                    yield NOT_SERVED
                    return
                if wait > 0:
                    await asyncio.sleep(wait)
                announced = (self.relay_owners or {}).get(owner, RELAY_BYTES)
                async for chunk in self._relayed_chunks(request, min(RELAY_BYTES, 2 * announced + RELAY_SLACK)):
                    yield chunk
        finally:
            self._relaying[requester] -= 1
            self._relayed[owner] -= 1
            self._strangers -= stranger
            self._relaying += collections.Counter()  # (drops the zero counts: the maps hold only pulls in flight)
            self._relayed += collections.Counter()

    async def _relayed_chunks(self, request, limit: int):
        """The owner's answer to a pull we relay, chunk by chunk, cut (counted: relay-slow, relay-bytes) at the
        first bound it breaks (see _relay); an owner whose bundle came whole is proven, one cut for its pace
        is not any more."""
        owner, start = request.owner, time.monotonic()
        forwarded = pb.BundleRequest(version=PROTOCOL_VERSION, kind=request.kind, digest=request.digest)
        try:
            stream = await asyncio.wait_for(self._node.p2p.iterate_protobuf_handler(
                self._peer_ref(owner), bundle_handler(self.settings.name), forwarded, pb.BundleChunk),
                RELAY_FIRST_CHUNK)
        except Exception as err:  # noqa: BLE001 (an owner we cannot reach: nothing to relay)
            log.debug("relaying to %s: %s", owner, first_line(err))
            yield NOT_SERVED
            return
        sent, total, waited, cut = 0, None, 0.0, ""
        try:
            while True:
                left = start + RELAY_TIMEOUT - time.monotonic()
                if left <= 0:
                    cut = "relay-slow"
                    break
                before = time.monotonic()
                try:
                    chunk = await asyncio.wait_for(anext(stream), min(left, RELAY_FIRST_CHUNK if total is None
                                                                      else RELAY_CHUNK))
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    cut = "relay-slow"
                    break
                waited += time.monotonic() - before  # (the owner's time, not the requester's reading)
                total = chunk.total if total is None else total
                sent += len(chunk.data)
                if total > limit or sent > total:
                    cut = "relay-bytes"
                    break
                if waited > RELAY_CHUNK and sent < RELAY_MIN_RATE * waited:
                    cut = "relay-slow"
                    break
                yield chunk
                if total == 0 or sent == total:
                    break
        finally:
            await stream.aclose()
        if cut:
            self.intake.refused[cut] += 1
            self._proven.pop(owner, None)
        elif total and sent == total:
            self._proven[owner] = None
            self._proven.move_to_end(owner)
            while len(self._proven) > RELAY_PROVEN:
                self._proven.popitem(last=False)
