"""The swarm: the DHT facade over hivemind (dht.py), sharing groups across it (exchange.py), the in-process
transport tests and benchmarks use (memory.py), the local control API (control.py), and the catalogue of
attacks a hostile peer can make (attacks.py, for tests and bench/attacks.py)."""
from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol

Records = dict[bytes, tuple[bytes, float]]  # sender's subkey -> (value, expiration)


class SwarmTransport(Protocol):
    """The seam between the exchange and the network: per-peer records of a few kinds, asynchronous."""

    @property
    def own_subkey(self) -> bytes:
        """This peer's subkey (its records are stored under it; its own are never fetched back)."""
        ...

    def now(self) -> float:
        """The swarm's clock (seconds), which record expirations and creation times use."""
        ...

    def publish_async(self, kind: str, value: bytes, ttl: float) -> Future[bool]:
        """Replaces this peer's record of `kind`; the future says whether it was stored."""
        ...

    def fetch_async(self, kind: str) -> Future[Records]:
        """Other peers' live records of `kind` (empty tombstones left out)."""
        ...

    def withdraw(self) -> None:
        """Replaces this peer's records with tombstones (on a clean stop)."""
        ...
