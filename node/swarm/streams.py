"""Bundles peer to peer (docs/PROTOCOL.md section 3): what a node serves, how it answers a pull, and how it pulls.

A part of `SwarmDHT` (node/swarm/dht.py), kept apart by concern: the host holds the libp2p daemon and the event
loop, and gives this part what it needs of the DHT library through three methods (`_peer_ref`, `_connect`,
`signature_check`), so that dht.py stays the one module that imports it.

Serving: the latest SERVED_BUNDLES of each kind, by digest or as the latest, in chunks whose first carries our
signature; a view bundle at most SERVES_PER_BUNDLE times ("busy" beyond); a push (`hello`) noted with the
stream's peer id. Every stream is admitted under the intake's limits and its request read under size and time
limits before it is parsed (node/swarm/intake.py). Pulling: paced under what the other side's intake admits,
dialled at most once per address per DIAL_AGAIN_AFTER, assembled and checked chunk by chunk (`BundleAssembler`).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import time

from node.errors import first_line
from node.swarm import ServedBundles
from node.swarm.intake import IntakeRefused, Pacer, StreamLimits, frame, parse_request, read_request
from protocol import PROTOCOL_VERSION
from protocol import swarm_pb2 as pb
from protocol.codec import BUSY_MARK, BundleAssembler, bundle_chunks, bundle_statement

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 512  # a BundleRequest: version, kind, 16-byte digest, a peer id (~60 bytes in practice)
REQUEST_TIMEOUT = 5.0  # seconds a stream may take to send its request (then it is dropped)
SERVE_TIMEOUT = 60.0  # seconds one answer may take as a whole (a reader that stops reading is dropped)
HELLOS = 64  # pushes (hello requests) remembered between two steps; the exchange takes at most a few
DIAL_AGAIN_AFTER = 300.0  # seconds before we dial a peer's announced addresses again (connected or not)
NOT_SERVED = pb.BundleChunk(version=PROTOCOL_VERSION, total=0)
BUSY = pb.BundleChunk(version=PROTOCOL_VERSION, total=0, digest=BUSY_MARK)  # served too often (SERVES_PER_BUNDLE)


def bundle_handler(swarm: str) -> str:
    """The libp2p protocol name of the pull handler."""
    return f"{swarm}/v{PROTOCOL_VERSION}/bundle"


def dialable(maddrs, peer_id: str) -> list[str]:
    """The announced addresses we dial for `peer_id`: an address naming another peer (/p2p/<other>) is dropped,
    the others are given without their /p2p/ part, because the daemon is asked to connect to `peer_id` at
    them (`connect(peer_id, addresses)`: its security handshake fails unless the remote is that identity, so an
    announcement cannot aim our connections at another peer). (p2pd 0.5 cannot parse the /p2p/ part of an
    address as py-multiaddr writes it for 12D3KooW... ids: "length greater than remaining number of bytes".)"""
    out = []
    for m in maddrs:
        address, _, named = m.partition("/p2p/")
        if named and named != peer_id:
            continue
        out.append(address.rstrip("/") or m)
    return out


class Streams:
    """Serving and pulling bundles (a part of SwarmDHT, which calls `_init_streams` and holds `relays`, `_loop`,
    `_node`, `settings` and `peer_id`)."""

    def _init_streams(self, served: ServedBundles) -> None:
        self._served = served  # the bundles we serve, signed
        self._dialled: dict[tuple[str, str], tuple[float, bool]] = {}  # (peer id, address) -> (when we last
        #                                                                 dialled it, whether that reached it)
        self._hellos: collections.deque[str] = collections.deque(maxlen=HELLOS)  # peers that pushed to us
        self.intake = StreamLimits()  # open streams and request rate per remote peer (node/swarm/intake.py)
        self.pacer = Pacer()  # our own requests to each peer, spaced under what its intake admits

    def verify(self, kind: str, digest: bytes, signature: bytes, signer: bytes) -> bool:
        """Whether the owner of DHT subkey `signer` signed this kind and digest."""
        return self.signature_check(kind, signer)(digest, signature)

    def serve(self, kind: str, bundle: bytes) -> bytes:
        """Serves `bundle` to peers that pull it by its digest (returned) or ask for the latest; the last
        SERVED_BUNDLES of a kind stay available, so a receiver that read an older announcement still gets what
        it names."""
        return self._served.add(kind, bundle)

    def signature(self, kind: str, digest: bytes) -> bytes:
        """Our signature of a bundle we serve (b"" when not served)."""
        found = self._served.get(kind, digest)
        return found[1] if found is not None else b""

    def sign(self, kind: str, digest: bytes) -> bytes:
        """Our signature of this kind and digest (a receipt), as we sign our bundles."""
        return self._sign(bundle_statement(kind, digest))

    def hello_async(self, peer_id: str, maddrs: tuple[str, ...] = (), timeout: float = 5.0):
        """Pushes to a peer: asks it to pull our view (our own announcement first); a concurrent future whose
        outcome means nothing (the answer is "not served" either way)."""
        return self.pull_async(peer_id, "hello", b"", 64, timeout, maddrs=maddrs)

    def refused_streams(self) -> dict[str, int]:
        return dict(self.intake.refused)  # (a copy: the counter is the event loop's)

    def take_hellos(self) -> list[str]:
        """The peer ids that pushed to us since the last call (at most HELLOS, oldest first)."""
        taken = list(self._hellos)
        self._hellos.clear()
        return taken

    async def _handle_bundle_stream(self, stream_info, reader, writer) -> None:
        """The pull handler's stream: admitted under the per-peer limits, its request read under size and time
        limits before it is parsed (node/swarm/intake.py), the answer written in hivemind's framing within
        SERVE_TIMEOUT. What is refused is counted in `intake.refused` by reason."""
        peer = str(stream_info.peer_id)
        with contextlib.closing(writer):
            try:
                self.intake.admit(peer)
            except IntakeRefused as err:
                log.debug("bundle stream from %s refused: %s", peer, err)
                return
            try:
                request = parse_request(await read_request(reader, MAX_REQUEST_BYTES, REQUEST_TIMEOUT))
                async with asyncio.timeout(SERVE_TIMEOUT), contextlib.aclosing(
                        self._serve_bundle(request, peer)) as chunks:
                    async for chunk in chunks:
                        writer.write(frame(chunk.SerializeToString()))
                        await writer.drain()
            except IntakeRefused as err:
                self.intake.refused[err.reason] += 1
                log.debug("bundle request from %s refused: %s", peer, err)
            except TimeoutError:
                self.intake.refused["serve-time"] += 1
            except (ConnectionError, asyncio.IncompleteReadError):  # the requester went away
                pass
            except Exception as err:  # noqa: BLE001 (a request that does not parse, or a stream that broke)
                self.intake.refused["malformed"] += 1
                log.debug("bundle request from %s: %s", peer, first_line(err))
            finally:
                self.intake.release(peer)

    async def _serve_bundle(self, request, requester: str = ""):
        """The answer to a pull: the named bundle in chunks (the first with our signature), a relayed pull of
        another peer's bundle, or one chunk of total 0 when it is not served here (and to a push)."""
        if request.kind == "hello":  # a push (gossip.py): noted with the stream's peer id, never relayed
            if request.version == PROTOCOL_VERSION and self.relays and requester:
                self._hellos.append(requester)
            yield NOT_SERVED
            return
        if request.version == PROTOCOL_VERSION and request.owner and request.owner != self.peer_id:
            if not self.relays:
                yield NOT_SERVED
                return
            async for chunk in self._relay(request, requester):
                yield chunk
            return
        if request.version == PROTOCOL_VERSION and self._served.busy(request.kind, bytes(request.digest), requester):
            self.intake.refused["busy"] += 1
            yield BUSY
            return
        found = self._served.get(request.kind, bytes(request.digest)) if request.version == PROTOCOL_VERSION \
            else None
        for chunk in bundle_chunks(*found) if found is not None else [NOT_SERVED]:
            yield chunk

    def pull_async(self, peer_id: str, kind: str, digest: bytes, max_bytes: int, timeout: float,
                   maddrs: tuple[str, ...] = (), signer: bytes = b"", via: str = ""):
        """Starts pulling a bundle of peer `peer_id` (by digest; b"": its latest of the kind), from the peer
        itself at `maddrs` (its announced addresses) or through the relay `via` (`maddrs` then the relay's);
        with `signer` (the owner's DHT subkey), only a bundle the owner signed is accepted. A concurrent future
        of its bytes, which raises RecordError (reason: missing, oversize, malformed, digest, signature,
        version) or a network error (TimeoutError included)."""
        return asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(self._pull(peer_id, kind, digest, max_bytes, maddrs, signer, via), timeout), self._loop)

    async def _pull(self, peer_id: str, kind: str, digest: bytes, max_bytes: int, maddrs: tuple[str, ...],
                    signer: bytes, via: str) -> bytes:
        target = self._peer_ref(via or peer_id)
        wait = self.pacer.delay(str(target))  # (no bound: never None)
        if wait:  # counted in the pull's timeout, like any slow answer
            await asyncio.sleep(wait)
        await self._reach(target, dialable(maddrs, str(target)))
        request = pb.BundleRequest(version=PROTOCOL_VERSION, kind=kind, digest=digest, owner=peer_id if via else "")
        assembler = BundleAssembler(digest, max_bytes, self.signature_check(kind, signer) if signer else None)
        stream = await self._node.p2p.iterate_protobuf_handler(
            target, bundle_handler(self.settings.name), request, pb.BundleChunk)
        try:
            async for chunk in stream:
                if assembler.add(chunk):
                    break
        finally:
            await stream.aclose()
        if not assembler.complete:  # the connection ended (the sender stopped, the network failed): not a record
            raise ConnectionError(f"the stream ended after {assembler.size} of {assembler.total} bytes")
        return assembler.bundle()

    async def _reach(self, target, addresses: list[str]) -> None:
        """Dials `target` at those of its announced addresses not dialled within DIAL_AGAIN_AFTER seconds; raises
        ConnectionError, opening no stream, when each of them failed then and we hold no connection to it. A
        stream opened to a peer we cannot reach makes p2pd dial it again by itself, so an announcement aiming
        our dials at another's listener (its own peer id, that listener's address) draws one dial a listener
        per DIAL_AGAIN_AFTER, however often it is re-announced or pulled (issue 54, 4)."""
        peer, now = str(target), time.monotonic()
        fresh = [a for a in addresses if now - self._dialled.get((peer, a), (-math.inf, False))[0] >= DIAL_AGAIN_AFTER]
        if fresh:
            try:
                await self._connect(target, fresh)
                reached = True
            except Exception as err:  # noqa: BLE001 (an unreachable address is remembered, not raised)
                log.debug("connecting to %s: %s", target, first_line(err))
                reached = False
            for address in fresh:
                self._remember_dial((peer, address), now, reached)
        unreached = addresses and not any(self._dialled.get((peer, a), (0.0, False))[1] for a in addresses)
        if unreached and not any(info.peer_id == target for info in await self._node.p2p.list_peers()):
            raise ConnectionError(f"{peer} did not answer at its announced addresses (tried again after "
                                  f"{DIAL_AGAIN_AFTER:g} s)")

    def _remember_dial(self, key: tuple[str, str], when: float, reached: bool) -> None:
        """Notes a dial of (peer id, address); bounded: the oldest entries go first."""
        if len(self._dialled) >= 4096:
            for old in sorted(self._dialled, key=lambda k: self._dialled[k][0])[:1024]:
                del self._dialled[old]
        self._dialled[key] = (when, reached)
