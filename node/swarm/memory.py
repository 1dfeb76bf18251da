"""An in-process swarm with the DHT's record semantics (per-peer subkeys, expiry, tombstones skipped).

Its transports satisfy `SwarmTransport` like the DHT does, with futures that are already done, so the
exchange takes the same path in tests and benchmarks as in production.
"""
from __future__ import annotations

import collections
import time
from collections.abc import Callable
from concurrent.futures import Future

from . import Records


def _done(value) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class MemorySwarm:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.records: dict[str, Records] = collections.defaultdict(dict)

    def transport(self, name: str) -> MemoryTransport:
        return MemoryTransport(self, name.encode())


class MemoryTransport:
    def __init__(self, hub: MemorySwarm, subkey: bytes):
        self.hub, self.own_subkey = hub, subkey

    def now(self) -> float:
        return self.hub.clock()

    def publish_async(self, kind: str, value: bytes, ttl: float) -> Future[bool]:
        self.hub.records[kind][self.own_subkey] = (value, self.now() + ttl)
        return _done(True)

    def fetch_async(self, kind: str) -> Future[Records]:
        now = self.now()
        return _done({k: v for k, v in self.hub.records[kind].items()
                      if k != self.own_subkey and v[1] > now and v[0]})

    def withdraw(self) -> None:
        for records in self.hub.records.values():
            records.pop(self.own_subkey, None)
