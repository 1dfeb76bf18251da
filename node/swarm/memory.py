"""An in-process swarm with the DHT's semantics: per-peer signed-like subkeys, expiry, tombstones skipped,
announcements in the two shards a subkey hashes to, and bundles pulled by digest (or the latest) in chunks.

Its transports satisfy `SwarmTransport` like the DHT does, with futures that are already done, so the
exchange takes the same path in tests and benchmarks as in production.
"""
from __future__ import annotations

import collections
import hashlib
import os
import time
from collections.abc import Callable
from concurrent.futures import Future

from protocol.codec import (
    BundleAssembler,
    RecordError,
    announcement_shard,
    announcement_shards,
    bundle_chunks,
    bundle_statement,
    chosen_shards,
)

from . import Records, ServedBundles


def done(value) -> Future:
    """A request answered at once (an in-process transport's: this one, and the discovery simulator's)."""
    future: Future = Future()
    future.set_result(value)
    return future


def failed(error: BaseException) -> Future:
    """A request that failed at once."""
    future: Future = Future()
    future.set_exception(error)
    return future


class MemorySwarm:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.announcements: dict[int, Records] = collections.defaultdict(dict)  # shard -> subkey -> record
        self.served: dict[str, ServedBundles] = {}  # peer id -> what it serves
        self.secret = os.urandom(16)  # in-process signatures: a keyed hash of the signer and the statement
        self.hellos: dict[str, collections.deque] = collections.defaultdict(lambda: collections.deque(maxlen=64))

    def sign(self, signer: bytes, statement: bytes) -> bytes:
        return hashlib.blake2b(signer + b"|" + statement, key=self.secret, digest_size=32).digest()

    def transport(self, name: str) -> MemoryTransport:
        return MemoryTransport(self, name)


class MemoryTransport:
    def __init__(self, hub: MemorySwarm, name: str):
        self.hub, self.peer_id, self.own_subkey = hub, name, name.encode()
        self.relay_owners: dict[str, int] | None = None  # (nothing is relayed in memory)
        self.initial: list[tuple[str, tuple[str, ...]]] = []  # initial peers (seeds), as the DHT's
        self.neighbours: list[tuple[str, tuple[str, ...]]] = []  # routing-table peers (seeds before the initial)

    @property
    def shard(self) -> int:
        return announcement_shard(self.own_subkey)

    def now(self) -> float:
        return self.hub.clock()

    def visible_maddrs(self) -> list[str]:
        return [f"/memory/{self.peer_id}"]

    def owns(self, subkey: bytes, peer_id: str) -> bool:
        """In memory an identity's subkey is its name, and its peer id the same name."""
        return subkey == peer_id.encode()

    def announce_async(self, value: bytes, ttl: float, levels=(0,)) -> Future[bool]:
        for shard in chosen_shards(self.own_subkey, levels):  # (as the DHT's)
            self.hub.announcements[shard][self.own_subkey] = (value, self.now() + ttl)
        return done(True)

    def fetch_shards_async(self, shards) -> Future[Records]:
        now = self.now()
        items = [(k, v) for i in shards for k, v in self.hub.announcements[i].items()
                 if k != self.own_subkey and v[1] > now]
        return done(Records({k: v for k, v in items if v[0]}, {k for k, v in items if not v[0]}))

    def serve(self, kind: str, bundle: bytes) -> bytes:
        sign = lambda statement: self.hub.sign(self.own_subkey, statement)  # noqa: E731
        return self.hub.served.setdefault(self.peer_id, ServedBundles(sign)).add(kind, bundle)

    def signature(self, kind: str, digest: bytes) -> bytes:
        served = self.hub.served.get(self.peer_id)
        found = served.get(kind, digest) if served is not None else None
        return found[1] if found is not None else b""

    def verify(self, kind: str, digest: bytes, signature: bytes, signer: bytes) -> bool:
        return signature == self.hub.sign(signer, bundle_statement(kind, digest))

    def sign(self, kind: str, digest: bytes) -> bytes:
        return self.hub.sign(self.own_subkey, bundle_statement(kind, digest))

    def hello_async(self, peer_id: str, maddrs: tuple[str, ...] = (), timeout: float = 5.0) -> Future[bytes]:
        if peer_id in self.hub.served:
            self.hub.hellos[peer_id].append(self.peer_id)
        return failed(RecordError("missing", "not served"))

    def seeds(self) -> list[tuple[str, tuple[str, ...]]]:
        return list(self.neighbours) + list(self.initial)

    def refused_streams(self) -> dict[str, int]:
        return {}  # (in memory, nothing is refused at the door)

    def cpu_seconds(self) -> tuple[float, float]:
        return 0.0, 0.0  # (no thread and no daemon: everything runs in the caller's)

    def take_hellos(self) -> list[str]:
        taken = list(self.hub.hellos[self.peer_id])
        self.hub.hellos[self.peer_id].clear()
        return taken

    def pull_async(self, peer_id: str, kind: str, digest: bytes, max_bytes: int, timeout: float,
                   maddrs: tuple[str, ...] = (), signer: bytes = b"", via: str = "") -> Future[bytes]:
        """As the DHT's, from the hub (in-process peers need no addresses, relays or signatures)."""
        served = self.hub.served.get(peer_id)
        if served is not None and served.busy(kind, digest, self.peer_id):
            return failed(RecordError("busy", "served too often"))
        found = served.get(kind, digest) if served is not None else None
        assembler = BundleAssembler(digest, max_bytes)
        try:
            if found is None:
                raise RecordError("missing", "the peer does not serve this bundle")
            for chunk in bundle_chunks(found[0]):
                if assembler.add(chunk):
                    break
            return done(assembler.bundle())
        except RecordError as err:
            return failed(err)

    def withdraw(self, ttl: float = 60.0) -> None:
        """Replaces our announcement with a tombstone (as the DHT's withdraw does)."""
        for shard in announcement_shards(self.own_subkey):
            self.hub.announcements[shard][self.own_subkey] = (b"", self.now() + ttl)
        self.hub.served.pop(self.peer_id, None)
