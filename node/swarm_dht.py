"""hivemind as the gossip layer, behind one synchronous facade. The only module that imports hivemind.

Two hivemind traps are avoided by construction:
- the stock `hivemind.DHT` runs its node in a child process behind a pipe read in non-blocking mode, and that
  process dies on values above ~16 KiB; we run `DHTNode` in our own asyncio loop on a daemon thread instead
  (140 KB values stored and fetched 30/30 at ~25 ms here);
- a value above the 4 MiB message limit is silently not replicated; `publish` refuses values above
  `max_value_bytes` (3 MiB by default) with an error instead.

Records: for each kind (e.g. "groups", "summaries") one DHT key per swarm and protocol version; each peer
writes only under its own subkey, which RSASignatureValidator binds to the peer's RSA public key (a forged
subkey or an overwrite of another peer's record is refused by every honest node), and a schema validator
refuses other keys and values that are not byte strings within the size budget. Values expire; on clean
shutdown a peer overwrites its records with an empty tombstone, which readers skip.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from protocol import PROTOCOL_VERSION

from .models import first_line

log = logging.getLogger(__name__)


class SwarmUnreachable(RuntimeError):
    """The DHT could not start or reach any initial peer; the message says which."""


@dataclass(frozen=True)
class DHTSettings:
    swarm: str = "default"  # swarm name: namespaces every key
    initial_peers: tuple[str, ...] = ()  # multiaddrs of a bootstrap node or any running peer
    host: str = "127.0.0.1"  # interface to listen on
    port: int = 0  # TCP port (0: any free port)
    announce: tuple[str, ...] = ()  # multiaddrs to announce instead of the listening ones (public hosts)
    identity_path: str = ""  # file with the libp2p and record-signing keys: a stable peer id across restarts
    startup_timeout: float = 30.0  # p2pd start-up time-out in seconds (hivemind's default 15 is often short)
    client_mode: bool = False  # reach the swarm without serving DHT requests (behind NAT)
    max_value_bytes: int = 3 * 1024 * 1024  # refuse to publish above this (hivemind's limit is 4 MiB)


def record_key(swarm: str, kind: str) -> str:
    return f"{swarm}/v{PROTOCOL_VERSION}/{kind}"


KINDS = ("groups", "summaries")


def _schema_validator(swarm: str, max_bytes: int):
    """Every honest node refuses records outside our schema: only our keys, values byte strings under the
    size budget. (Content is validated again, strictly, by every receiver's codec.)"""
    from hivemind.dht.protocol import DHTProtocol
    from hivemind.dht.routing import DHTID
    from hivemind.dht.validation import RecordValidatorBase

    key_ids = {DHTID.generate(source=record_key(swarm, kind)).to_bytes() for kind in KINDS}

    class SwarmSchemaValidator(RecordValidatorBase):
        def validate(self, record) -> bool:
            if record.key not in key_ids or record.subkey in DHTProtocol.RESERVED_SUBKEYS:
                return False
            try:
                value = DHTProtocol.serializer.loads(record.value)
            except Exception:  # noqa: BLE001 (anything undecodable is simply invalid)
                return False
            return isinstance(value, bytes) and len(value) <= max_bytes

        @property
        def priority(self) -> int:
            return 0  # after the signature validator has stripped the signature

    return SwarmSchemaValidator()


def _load_or_create_signing_key(path: str):
    """An RSA key for record signatures, kept beside the libp2p identity so the subkey survives restarts."""
    from cryptography.hazmat.primitives import serialization
    from hivemind.utils.crypto import RSAPrivateKey

    if not path:
        return RSAPrivateKey()
    key_file = Path(path + ".rsa")
    if key_file.exists():
        key = RSAPrivateKey.__new__(RSAPrivateKey)
        key._private_key = serialization.load_der_private_key(key_file.read_bytes(), password=None)
        return key
    key = RSAPrivateKey()
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key_file.write_bytes(key.to_bytes())
    key_file.chmod(0o600)
    return key


class SwarmDHT:
    """A DHT node in a private event loop with blocking, time-bounded methods."""

    def __init__(self, settings: DHTSettings):
        from hivemind.dht.crypto import RSASignatureValidator
        from hivemind.dht.validation import CompositeValidator
        from hivemind.p2p.p2p_daemon_bindings.utils import P2PDaemonError

        self.settings = settings
        self.validator = RSASignatureValidator(_load_or_create_signing_key(settings.identity_path))
        self.record_validator = CompositeValidator(
            [self.validator, _schema_validator(settings.swarm, settings.max_value_bytes)])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="swarm-dht", daemon=True)
        self._thread.start()
        try:
            self._node = self._call(self._create(), timeout=settings.startup_timeout + 30)
        except (P2PDaemonError, OSError, RuntimeError, TimeoutError, ValueError) as err:
            self._stop_loop()
            raise SwarmUnreachable(self._describe_failure(err)) from None
        self._published: dict[str, float] = {}  # kind -> expiration of our latest record

    def _describe_failure(self, err: Exception) -> str:
        peers = ", ".join(self.settings.initial_peers) or "none"
        return f"could not join the swarm (initial peers: {peers}): {first_line(err)}"

    async def _create(self):
        from hivemind.dht.node import DHTNode

        s = self.settings
        kwargs = {"host_maddrs": [f"/ip4/{s.host}/tcp/{s.port}"], "startup_timeout": s.startup_timeout}
        if s.announce:
            kwargs["announce_maddrs"] = list(s.announce)
        if s.identity_path:
            Path(s.identity_path).parent.mkdir(parents=True, exist_ok=True)
            kwargs["identity_path"] = s.identity_path
        return await DHTNode.create(initial_peers=list(s.initial_peers), record_validator=self.record_validator,
                                    client_mode=s.client_mode, **kwargs)

    def _call(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def own_subkey(self) -> bytes:
        return self.validator.local_public_key

    @property
    def peer_id(self) -> str:
        return str(self._node.peer_id)

    def visible_maddrs(self) -> list[str]:
        return [str(m) for m in self._call(self._node.get_visible_maddrs(), timeout=10)]

    def now(self) -> float:
        from hivemind.utils.timed_storage import get_dht_time

        return get_dht_time()

    def publish(self, kind: str, value: bytes, ttl: float, timeout: float = 10.0) -> bool:
        """Stores our record of this kind (replacing our previous one); False when no replica took it."""
        return bool(self.publish_async(kind, value, ttl).result(timeout))

    def publish_async(self, kind: str, value: bytes, ttl: float):
        """Like publish, without waiting: returns a concurrent future (result True when stored)."""
        if len(value) > self.settings.max_value_bytes:
            raise ValueError(f"{kind} record of {len(value)} bytes exceeds max_value_bytes "
                             f"{self.settings.max_value_bytes} (hivemind drops values above 4 MiB silently)")
        expiration = max(self.now() + ttl, self._published.get(kind, 0.0) + 1e-3)
        self._published[kind] = expiration
        coro = self._node.store(record_key(self.settings.swarm, kind), value, expiration, subkey=self.own_subkey)
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def fetch(self, kind: str, timeout: float = 10.0) -> dict[bytes, tuple[bytes, float]]:
        """Other peers' live records of this kind: {subkey: (value, expiration)}; tombstones skipped."""
        return self.fetch_async(kind).result(timeout)

    def fetch_async(self, kind: str):
        """Starts a fetch in the DHT's loop; returns a concurrent future of fetch()'s result."""
        return asyncio.run_coroutine_threadsafe(self._fetch(kind), self._loop)

    async def _fetch(self, kind: str) -> dict[bytes, tuple[bytes, float]]:
        found = await self._node.get(record_key(self.settings.swarm, kind), latest=True)
        if found is None or not isinstance(found.value, dict):
            return {}
        out = {}
        for subkey, item in found.value.items():
            if subkey != self.own_subkey and isinstance(item.value, bytes) and item.value:
                out[subkey] = (item.value, item.expiration_time)
        return out

    def withdraw(self, timeout: float = 5.0) -> None:
        """Replaces each of our records with an empty tombstone (a later expiration wins in hivemind)."""
        for kind, expiration in list(self._published.items()):
            tomb_expiration = max(expiration, self.now()) + 1.0
            try:
                self._call(self._node.store(record_key(self.settings.swarm, kind), b"", tomb_expiration,
                                            subkey=self.own_subkey), timeout=timeout)
            except TimeoutError:
                log.warning("withdrawing our %s record timed out; it will expire by itself", kind)
        self._published.clear()

    def shutdown(self) -> None:
        try:
            self._call(self._node.shutdown(), timeout=15)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        try:
            self._call(_cancel_pending(), timeout=5)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._thread.is_alive():
                self._loop.close()


async def _cancel_pending() -> None:
    """Cancels hivemind's background tasks so the loop stops cleanly."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
