"""The swarm: the DHT facade over hivemind (dht.py), sharing groups across it (exchange.py), the in-process
transport tests and benchmarks use (memory.py) and the local control API (control.py). The catalogue of attacks
a hostile peer can make is not part of the installed node: bench/attacks/hostile.py, for tests and
bench/attacks/catalogue.py."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from protocol.codec import bundle_digest, bundle_statement


class Records(dict):
    """A read of announcements: {sender's subkey: (value, expiration)} of the live ones, and `withdrawn`, the
    subkeys whose record was a tombstone in this read (their owner withdrew: the only evidence, besides
    expiry, on which a reader forgets a sender; an empty or late read is not)."""

    def __init__(self, values=(), withdrawn=()):
        super().__init__(values)
        self.withdrawn = frozenset(withdrawn)


def finished(futures: dict) -> list[tuple]:
    """The (key, future) pairs of `futures` (the transport's requests in flight) that are done, removed from it."""
    done = [(key, future) for key, future in futures.items() if future.done()]
    for key, _ in done:
        del futures[key]
    return done


SERVED_BUNDLES = 2  # bundles of a kind a peer keeps serving (its latest, and the one before for late readers)
SERVES_PER_BUNDLE = {"view": 8}  # peers one bundle of a kind is served to before other peers' pulls of it are
#   answered "busy" (a peer served it already is served again, within the intake limits): a view is renewed each
#   step and pulled by about 2 + (pushers) peers a step on average, so the peers most vouched for are not asked
#   for views by ever more peers as the swarm grows


class ServedBundles:
    """The bundles a peer serves, by kind and digest, each with its owner's signature: the latest
    SERVED_BUNDLES of each kind."""

    def __init__(self, sign: Callable[[bytes], bytes] | None = None):
        """sign: the owner's signature of a bundle_statement (None: bundles go unsigned, in-process only)."""
        self.sign = sign
        self._by_kind: dict[str, OrderedDict[bytes, tuple[bytes, bytes]]] = {}
        self._serves: dict[tuple[str, bytes], set[str]] = {}  # (kind, digest) -> peers served (SERVES_PER_BUNDLE)

    def add(self, kind: str, bundle: bytes) -> bytes:
        """Serves `bundle` (dropping the oldest beyond SERVED_BUNDLES); returns its digest."""
        served = self._by_kind.setdefault(kind, OrderedDict())
        digest = bundle_digest(bundle)
        served[digest] = (bundle, self.sign(bundle_statement(kind, digest)) if self.sign else b"")
        while len(served) > SERVED_BUNDLES:
            old, _ = served.popitem(last=False)
            self._serves.pop((kind, old), None)
        return digest

    def busy(self, kind: str, digest: bytes, requester: str) -> bool:
        """Notes a pull of this kind and digest (b"": the latest) by `requester` (a peer id) and says whether to
        answer it "busy" instead of serving it: SERVES_PER_BUNDLE other peers had it."""
        limit = SERVES_PER_BUNDLE.get(kind)
        served = self._by_kind.get(kind)
        if limit is None or not served:
            return False
        key = (kind, digest or next(reversed(served)))
        if key[1] not in served:
            return False
        peers = self._serves.setdefault(key, set())
        if requester in peers:
            return False
        if len(peers) >= limit:
            return True
        peers.add(requester)
        return False

    def latest(self, kind: str) -> tuple[bytes, bytes] | None:
        """(digest, bundle) of the newest bundle of a kind, or None."""
        served = self._by_kind.get(kind)
        if not served:
            return None
        digest, (bundle, _) = next(reversed(served.items()))
        return digest, bundle

    def get(self, kind: str, digest: bytes) -> tuple[bytes, bytes] | None:
        """(bundle, signature) of that digest (b"": the latest), or None when it is not served."""
        served = self._by_kind.get(kind)
        if not served:
            return None
        return next(reversed(served.values())) if not digest else served.get(digest)


class SwarmTransport(Protocol):
    """The seam between the exchange and the network: small signed announcements in sharded DHT keys, and
    bundles served and pulled peer to peer (docs/PROTOCOL.md); asynchronous."""

    relay_owners: dict[str, int] | None  # the peers whose pulls this node relays, each with the largest bundle it
    #                                      announced (None: any); the exchange sets it

    @property
    def own_subkey(self) -> bytes:
        """This peer's subkey (its records are stored under it; its own are never fetched back)."""
        ...

    @property
    def peer_id(self) -> str:
        """This peer's id on the peer-to-peer layer (what others pull from)."""
        ...

    def owns(self, subkey: bytes, peer_id: str) -> bool:
        """Whether the identity of DHT subkey `subkey` is the peer `peer_id` (what an announcement must say of
        itself: a key names only its own peer id, so no announcement aims others' dials at a third peer)."""
        ...

    def visible_maddrs(self) -> list[str]:
        """Addresses others can reach this peer at."""
        ...

    def now(self) -> float:
        """The swarm's clock (seconds), which record expirations and creation times use."""
        ...

    def announce_async(self, value: bytes, ttl: float, levels=(0,)) -> Future[bool]:
        """Replaces this peer's announcement in its shards at these levels (protocol SHARD_LEVELS); the future
        says whether it was stored."""
        ...

    def fetch_shards_async(self, shards: list[int]) -> Future[Records]:
        """Other peers' live announcements in the given shards (empty tombstones left out)."""
        ...

    def serve(self, kind: str, bundle: bytes) -> bytes:
        """Serves a bundle to the peers that pull it; returns its digest."""
        ...

    def pull_async(self, peer_id: str, kind: str, digest: bytes, max_bytes: int, timeout: float,
                   maddrs: tuple[str, ...] = (), signer: bytes = b"", via: str = "") -> Future[bytes]:
        """Pulls a bundle (by digest; b"": the latest of its kind) from a peer, at its announced addresses
        `maddrs`, or through the relay `via`; checks that the owner of subkey `signer` signed it. RecordError
        by reason."""
        ...

    def signature(self, kind: str, digest: bytes) -> bytes:
        """Our signature of a bundle we serve (what a pull of it carries; b"" when not served)."""
        ...

    def verify(self, kind: str, digest: bytes, signature: bytes, signer: bytes) -> bool:
        """Whether the owner of identity `signer` signed this kind and digest (a view entry passed on)."""
        ...

    def sign(self, kind: str, digest: bytes) -> bytes:
        """Our signature of this kind and digest (a receipt: node/swarm/receipts.py)."""
        ...

    def hello_async(self, peer_id: str, maddrs: tuple[str, ...] = (), timeout: float = 5.0) -> Future[bytes]:
        """Pushes to a peer: asks it to pull our view (its outcome means nothing)."""
        ...

    def seeds(self) -> list[tuple[str, tuple[str, ...]]]:
        """(peer id, addresses) whose views a newcomer pulls first: a few DHT neighbours, then our initial
        peers."""
        ...

    def take_hellos(self) -> list[str]:
        """The peer ids that pushed to us since the last call."""
        ...

    def refused_streams(self) -> dict[str, int]:
        """Streams other peers opened to our pull handler that it refused, by reason, in all (intake.py)."""
        ...

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU the network has used in all, outside the caller's thread: (our network thread's, the network
        daemon's); 0.0 where there is none (the in-process swarm)."""
        ...

    def withdraw(self) -> None:
        """Replaces this peer's records with tombstones and stops serving (on a clean stop)."""
        ...
