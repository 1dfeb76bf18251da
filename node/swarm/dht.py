"""hivemind as the gossip layer, behind one synchronous facade. The only module that imports hivemind.

Two hivemind traps are avoided by construction:
- the stock `hivemind.DHT` runs its node in a child process behind a pipe read in non-blocking mode, and that
  process dies on values above ~16 KiB; we run `DHTNode` in our own asyncio loop on a daemon thread instead;
- a value above the 4 MiB message limit is silently not replicated (and its holders leak memory answering
  for it); the DHT now holds only announcements of at most 2 KiB, and bundles cross peer to peer in chunks.

Records (docs/PROTOCOL.md): the DHT holds only announcements, spread over ANNOUNCE_SHARDS keys per swarm and
protocol version; each peer writes one, under its own subkey in the shard that subkey hashes to, which
RSASignatureValidator binds to the peer's RSA public key (a forged subkey or an overwrite of another peer's
record is refused by every honest node). The schema validator makes that binding mandatory: hivemind's
signature check applies only to subkeys that carry the owner marker, so a record under our keys must have a
`bytes` subkey that *is* an owner marker (a plain or `str` subkey would need no signature, and mixing `str`
and `bytes` subkeys crashes hivemind's expiry heap), an expiration at most MAX_RECORD_TTL (+ clock skew)
ahead, a byte string of at most MAX_ANNOUNCEMENT bytes, and the right shard. Values expire; on clean shutdown
a peer overwrites its announcement with an empty tombstone, which readers skip, and stops serving its bundles,
which others pull from it over the same libp2p daemon (`serve`, `pull_async`).

Healing: a node that restarts (same identity, same address) comes back with an empty routing table, and the
others have dropped it from theirs. Every node therefore re-announces itself to its initial peers every
`reannounce_every` seconds, and sooner, with back-off, while it sees no other peer (re-bootstrapping its
routing table then), so the swarm heals after any single process restarts.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import random
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from node.config import SwarmConfig
from node.errors import IdentityCorrupt, IdentityInUse, Stopped, SwarmUnreachable, first_line
from node.swarm import Records, ServedBundles
from node.swarm.intake import IntakeRefused, StreamLimits
from node.swarm.relay import Relay
from node.swarm.streams import Streams, bundle_handler
from node.system.cpu import process_cpu, thread_cpu
from node.system.process import IdentityLock, ensure_port_free, kill_pids, own_children
from protocol import (
    ANNOUNCE_SHARDS,
    CLOCK_SKEW,
    MAX_ANNOUNCEMENT,
    MAX_RECORD_TTL,
    MAX_SHARD_ANNOUNCEMENTS,
    PROTOCOL_VERSION,
    SHARD_LEVELS,
)
from protocol.codec import (
    announcement_shard,
    announcement_shards,
    bundle_statement,
    chosen_shards,
    shard_level,
)

log = logging.getLogger(__name__)


OWNER_SUBKEY = re.compile(rb"\[owner:([^\[\]]+)\]")  # hivemind's RSASignatureValidator marker, nothing else
ALONE_FIRST_RETRY = 2.0  # seconds before the first re-bootstrap once a node sees no other peer (then doubling)
# The DHT's own copying, chosen rather than left at hivemind's defaults: a value is kept by the NUM_REPLICAS
# nodes nearest its key, where its owner stores it (every step, as announcements change every step); a node
# does not cache what it reads (a reader wants the newest: every read searches to the replicas anyway, and a
# cache would be re-fetched before it expires and served to others stale), pushes nothing it found to further
# nodes, and caches nothing it stores.
DHT_COPYING = {"num_replicas": 5, "cache_locally": False, "cache_nearest": 0, "cache_on_store": False}
STORE_RATE, STORE_BURST = 10.0, 30.0  # DHT store requests a remote peer may make a second, and at once (an
#                                       honest peer stores its announcement to a few nodes once a step)
READ_FRESH_WITHIN = 30.0  # a directory read stops at the first replica whose value holds an announcement stored
#                          within this many seconds (its expiration at least now + record_ttl - this): one fresh
#                          replica, not the whole beam of about num_replicas (each returns the whole shard)
READ_TIMEOUT = 20.0  # seconds a directory read may take as a whole (silent DHT nodes): then it is abandoned
SEED_NEIGHBOURS = 2  # routing-table peers whose views a newcomer pulls before its initial peers' (seeds())


def signature_check(kind: str, signer: bytes):
    """`verify(digest, signature)` for BundleAssembler: whether the owner of DHT subkey `signer` (its RSA public
    key, the one that signs its announcement) signed this kind and digest."""
    from hivemind.utils.crypto import RSAPublicKey

    match = OWNER_SUBKEY.fullmatch(signer)
    try:
        key = RSAPublicKey.from_bytes(match.group(1)) if match else None
    except Exception:  # noqa: BLE001 (a malformed key in a subkey verifies nothing)
        key = None

    def verify(digest: bytes, signature: bytes) -> bool:
        try:
            return key is not None and bool(signature) and key.verify(bundle_statement(kind, digest), signature)
        except Exception:  # noqa: BLE001 (an undecodable signature is simply not valid)
            return False

    return verify


def record_key(swarm: str, kind: str) -> str:
    return f"{swarm}/v{PROTOCOL_VERSION}/{kind}"


def multiaddr_protocols(text: str) -> list[str]:
    """The protocol names of a multiaddr, in order (hivemind's parser); ValueError, saying which part is wrong and
    why, for text that is not one (node/swarm/addresses.py words it for the user)."""
    from hivemind.utils.multiaddr import Multiaddr
    from hivemind.utils.multiaddr.exceptions import Error

    try:
        return [p.name for p in Multiaddr(text).protocols()]
    except Error as err:
        raise ValueError(str(err)) from None


def announcement_kind(shard: int) -> str:
    """The record kind (and so the DHT key) of announcement shard id `shard`: `ann/{j}` at level 0, `ann/{l}.{j}`
    at level l (protocol SHARD_LEVELS)."""
    level, number = shard_level(shard)
    return f"ann/{number}" if level == 0 else f"ann/{level}.{number}"


def _schema_validator(swarm: str, held=lambda key: None):
    """Every honest node refuses records outside our schema: only our keys; the subkey a `bytes` owner marker
    (so RSASignatureValidator always checks the owner's signature); an expiration at most MAX_RECORD_TTL
    ahead (+ clock skew); the value a byte string under the size budget; an announcement at most
    MAX_ANNOUNCEMENT bytes and only in the shards its subkey hashes to (one a level); and no new identity in
    a shard that already holds MAX_SHARD_ANNOUNCEMENTS here (`held(key)`: what this node stores under the key),
    so that no key's value nears hivemind's 4 MiB however many identities grind their keys into one shard.
    (Content is validated again, strictly, by every receiver's codec.)"""
    from hivemind.dht.protocol import DHTProtocol
    from hivemind.dht.routing import DHTID
    from hivemind.dht.validation import RecordValidatorBase
    from hivemind.utils.timed_storage import get_dht_time

    shard_ids = {DHTID.generate(source=record_key(swarm, announcement_kind(i))).to_bytes(): i
                 for i in range(sum(SHARD_LEVELS))}

    def loads(data: bytes):
        try:
            return DHTProtocol.serializer.loads(data)
        except Exception:  # noqa: BLE001 (anything undecodable is simply invalid)
            return None

    class SwarmSchemaValidator(RecordValidatorBase):
        def validate(self, record) -> bool:
            if record.key not in shard_ids:
                return False
            subkey = loads(record.subkey)
            if not isinstance(subkey, bytes) or not OWNER_SUBKEY.fullmatch(subkey):
                return False
            if not record.expiration_time <= get_dht_time() + MAX_RECORD_TTL + CLOCK_SKEW:
                return False
            value = loads(record.value)  # one small announcement per identity, in its own shards only
            if not (isinstance(value, bytes) and len(value) <= MAX_ANNOUNCEMENT
                    and shard_ids[record.key] in announcement_shards(subkey)):
                return False
            stored = held(record.key)
            return stored is None or subkey in stored or len(stored) < MAX_SHARD_ANNOUNCEMENTS

        @property
        def priority(self) -> int:
            return 0  # after the signature validator has checked and stripped the signature

    return SwarmSchemaValidator()


def keep_valid_subrecords(protocol, key_bytes: bytes, dictionary) -> bool:
    """Validates a dictionary value sub-record by sub-record, dropping the invalid ones and keeping the rest
    (installed on our node's DHTProtocol in place of `_validate_dictionary`, hivemind 1.1.12). hivemind's own
    drops the whole value when one sub-record fails: one key ground into a shard and stored at the holders'
    expiration limit made a reader whose clock was 3 s behind see none of the shard's announcements (issue 23).
    Always True: what is left of the value is valid (a holder stores it, a reader reads it)."""
    from hivemind.dht.validation import DHTRecord

    if protocol.record_validator is None:
        return True
    invalid = []
    with dictionary.freeze():
        for subkey, (value_bytes, expiration_time) in dictionary.items():
            record = DHTRecord(key_bytes, protocol.serializer.dumps(subkey), value_bytes, expiration_time)
            if not protocol.record_validator.validate(record):
                invalid.append(subkey)
    for subkey in invalid:
        del dictionary[subkey]
    return True


async def install_store_limit(node, limits: StreamLimits) -> None:
    """Puts a per-remote-peer rate limit in front of the node's DHT store handler (hivemind 1.1.12 gives its
    handler no such hook: it is re-registered under its own name, so the wire is unchanged). A store beyond
    the rate is answered "not stored" for every key at once, before any value is decoded or any signature
    checked (~1.7 ms of CPU per stored announcement otherwise: one stranger at ~1000 stores a second saturated
    a 2-core bootstrap, issue 23 point 10)."""
    from hivemind.dht.protocol import DHTProtocol
    from hivemind.proto import dht_pb2

    protocol = node.protocol
    original = protocol.rpc_store

    async def rpc_store(request, context):
        peer = str(context.remote_id)
        try:
            limits.admit(peer)
        except IntakeRefused:
            return dht_pb2.StoreResponse(store_ok=[False] * len(request.keys), peer=protocol.node_info)
        limits.release(peer)
        return await original(request, context)

    name = DHTProtocol._get_handle_name(None, "rpc_store")
    await node.p2p.remove_protobuf_handler(name)
    await node.p2p.add_protobuf_handler(name, rpc_store, dht_pb2.StoreRequest)


def check_identity_file(path: str) -> None:
    """Raises IdentityCorrupt, in one line, when an existing identity file is not a libp2p private key (p2pd
    would fail to start with a protobuf error, and joining would retry it for ever)."""
    from cryptography.hazmat.primitives import serialization
    from google.protobuf.message import DecodeError
    from hivemind.proto import crypto_pb2

    if not path or not Path(path).is_file():
        return
    try:
        key = crypto_pb2.PrivateKey.FromString(Path(path).read_bytes())
        serialization.load_der_private_key(key.data, password=None)
    except (DecodeError, ValueError, TypeError, OSError) as err:
        raise IdentityCorrupt(f"identity file {path} is not a readable private key ({first_line(err)}): restore "
                              f"it, or remove it to start as a new peer id") from None


def _identity_key(path: str):
    """(the RSA key of our libp2p identity, whether it was made just now): read from the identity file at `path`,
    or made (and written there, mode 0600, where a path is given). The same key signs our DHT records and
    bundles, so our subkey proves our peer id (`peer_id_of`): an announcement cannot name a peer id its key
    does not own. (Before issue 54 records were signed with a second key kept in `<identity>.rsa`: a peer that
    has one signs with its identity's key from now on, and is a new sender to the others once.)"""
    from cryptography.hazmat.primitives import serialization
    from hivemind.proto import crypto_pb2
    from hivemind.utils.crypto import RSAPrivateKey

    if path and Path(path).is_file():  # (check_identity_file has read it as a key)
        stored = crypto_pb2.PrivateKey.FromString(Path(path).read_bytes())
        if stored.key_type != crypto_pb2.KeyType.RSA:
            raise IdentityCorrupt(f"identity file {path} holds a {crypto_pb2.KeyType.Name(stored.key_type)} key; "
                                  f"this node's identities are RSA keys: remove it to start as a new peer id")
        key = RSAPrivateKey.__new__(RSAPrivateKey)
        key._private_key = serialization.load_der_private_key(stored.data, password=None)
        return key, False
    key = RSAPrivateKey()
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(identity_bytes(key))
        Path(path).chmod(0o600)
    return key, True


def identity_bytes(key) -> bytes:
    """An RSA key (hivemind's RSAPrivateKey) as a libp2p identity file holds it."""
    from hivemind.proto import crypto_pb2

    return crypto_pb2.PrivateKey(key_type=crypto_pb2.KeyType.RSA, data=key.to_bytes()).SerializeToString()


@functools.lru_cache(maxsize=4096)
def peer_id_of(subkey: bytes) -> str:
    """The libp2p peer id of the key a DHT subkey names ("" for a subkey that names no RSA key): an
    announcement's peer id must be this (exchange.py), since each node's identity key signs its records."""
    from cryptography.hazmat.primitives import serialization
    from hivemind.p2p import PeerID
    from hivemind.proto import crypto_pb2

    match = OWNER_SUBKEY.fullmatch(subkey)
    try:
        public = serialization.load_ssh_public_key(match.group(1))
        der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    except Exception:  # noqa: BLE001 (a subkey that names no key owns no peer id)
        return ""
    encoded = crypto_pb2.PublicKey(key_type=crypto_pb2.RSA, data=der).SerializeToString()
    return PeerID(b"\x12\x20" + hashlib.sha256(encoded).digest()).to_base58()  # (multihash: sha2-256, 32 bytes)


class SwarmDHT(Streams, Relay):
    """A DHT node in a private event loop with blocking, time-bounded methods; its bundles' serving and pulling
    (streams.py) and its relaying (relay.py) are parts of it kept in modules of their own."""

    max_value_bytes = MAX_ANNOUNCEMENT  # the largest value publish accepts (the schema's limit)
    dht_copying = DHT_COPYING

    def __init__(self, settings: SwarmConfig, stop: threading.Event | None = None, bundles: bool = True,
                 relays: bool = True):
        """stop: an event that, once set, abandons a start in progress (raises Stopped); bundles: serve bundles
        (a bootstrap serves only its view: node/swarm/seeding.py; without peer sampling, none); relays: relay
        pulls for peers that cannot accept connections, and take pushes (a bootstrap does neither)."""
        from hivemind.dht.crypto import RSASignatureValidator
        from hivemind.dht.validation import CompositeValidator

        self.settings, self.bundles, self.relays = settings, bundles, relays
        ensure_port_free(settings.host, settings.port, "DHT", "--host (swarm.host)")  # (a host that is no address
        #                                                                           of ours was retried for ever)
        check_identity_file(settings.identity)  # before the lock: a corrupt file holds nothing
        self._lock = IdentityLock(settings.identity) if settings.identity else None
        signing_key, self._new_identity = _identity_key(settings.identity)
        self._identity_dir = None if settings.identity else tempfile.mkdtemp(prefix="swarm-identity-")
        self._identity_path = settings.identity or str(Path(self._identity_dir) / "identity.key")
        if self._identity_dir:  # an identity for this process only: the daemon needs it as a file
            Path(self._identity_path).write_bytes(identity_bytes(signing_key))
            Path(self._identity_path).chmod(0o600)
        self.validator = RSASignatureValidator(signing_key)
        self.record_validator = CompositeValidator(self._validators())
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._closing = False
        self._thread = threading.Thread(target=self._loop.run_forever, name="swarm-dht", daemon=True)
        self._thread.start()
        self._sign = signing_key.sign
        self._init_streams(ServedBundles(sign=self._sign))  # bundles signed with our announcement's key
        self._init_relay()
        self.stores = StreamLimits(per_peer=1 << 30, total=1 << 30, rate=STORE_RATE, burst=STORE_BURST)  # DHT
        #             stores per remote peer (install_store_limit); its `refused["rate"]` counts refused requests
        self._seeds: list[tuple[str, tuple[str, ...]]] | None = None  # initial peers, parsed (seeds())
        self._neighbours: list[str] = []  # routing-table peers drawn as seeds (seeds())
        self._node = self._start(stop)
        self._published: dict[str, float] = {}  # kind -> expiration of our latest record
        self.peers_seen = -1  # announcements of other peers at the last read that found any, or read all
        #                       shards (-1: none yet; 0: alone)
        self._maintenance = asyncio.run_coroutine_threadsafe(self._maintain(), self._loop)

    def _validators(self) -> list:
        """Signatures first, then our schema (a red-team harness overrides this to store anything)."""
        return [self.validator, _schema_validator(self.settings.name, self._held)]

    def _held(self, key: bytes):
        """What this node stores under a DHT key (a dictionary of subkeys), or None."""
        from hivemind.dht.routing import DHTID

        node = getattr(self, "_node", None)
        found = node.protocol.storage.get(DHTID.from_bytes(key)) if node is not None else None
        return found.value if found is not None and hasattr(found.value, "items") else None

    def _start(self, stop: threading.Event | None):
        from hivemind.p2p.p2p_daemon_bindings.utils import P2PDaemonError

        daemons_before = set(own_children("p2pd"))
        future = asyncio.run_coroutine_threadsafe(self._create(), self._loop)
        deadline = time.monotonic() + self.settings.startup_timeout + 30
        try:
            while True:
                try:
                    return future.result(timeout=0.2)
                except TimeoutError:
                    if stop is not None and stop.is_set():
                        raise Stopped("while starting its DHT node") from None
                    if time.monotonic() > deadline:
                        raise
        except (P2PDaemonError, OSError, RuntimeError, TimeoutError, ValueError) as err:
            self._closing = True
            kill_pids(set(own_children("p2pd")) - daemons_before)  # a daemon of the abandoned attempt
            future.cancel()
            try:  # let asyncio see the daemon's exit and close its pipes while the loop still runs
                self._call(asyncio.sleep(0.3), timeout=5)
            except Exception as pause_error:  # noqa: BLE001 (the loop is stopped below in any case)
                log.debug("pausing after an abandoned start: %s", first_line(pause_error))
            self._stop_loop(close=False)  # objects of the abandoned start may still call into the loop
            self._release()
            if isinstance(err, Stopped):
                raise
            if "already taken" in str(err):  # hivemind's own check: this peer id is live elsewhere
                raise IdentityInUse(f"identity file {self.settings.identity} is used by a running peer "
                                    f"of the swarm: {first_line(err)}") from None
            raise SwarmUnreachable(self._describe_failure(err)) from None

    def _loop_error(self, loop, context: dict) -> None:
        """hivemind's background tasks: one line, not a traceback (debug only once we are shutting down,
        when cancelled daemons and connections report their ends)."""
        error = context.get("exception")
        line = f"DHT background: {context.get('message')}" + (f" ({first_line(error)})" if error else "")
        log.log(logging.DEBUG if self._closing else logging.WARNING, line)

    def _describe_failure(self, err: Exception) -> str:
        peers = ", ".join(self.settings.initial_peers) or "none"
        return f"could not join the swarm (initial peers: {peers}): {first_line(err)}"

    async def _create(self):
        from hivemind.dht.node import DHTNode

        s = self.settings
        kwargs = {"host_maddrs": [f"/ip4/{s.host}/tcp/{s.port}"], "startup_timeout": s.startup_timeout,
                  **self.dht_copying}
        if s.announce:
            kwargs["announce_maddrs"] = list(s.announce)
        kwargs["identity_path"] = self._identity_path  # the key our records are signed with (_identity_key)
        if self._new_identity:  # made just now: no one else can hold it (hivemind would start a daemon to ask)
            kwargs["check_if_identity_free"] = False
        if s.client_mode:  # no inbound connections: serve no DHT requests; others pull through relays
            kwargs.update(client_mode=True, force_reachability="private")
        node = await DHTNode.create(initial_peers=list(s.initial_peers), record_validator=self.record_validator,
                                    **kwargs)
        node.protocol._validate_dictionary = functools.partial(keep_valid_subrecords, node.protocol)
        if not s.client_mode:  # (a client serves no DHT requests)
            await install_store_limit(node, self.stores)
        if self.bundles:
            await node.p2p.add_binary_stream_handler(bundle_handler(s.name), self._handle_bundle_stream)
        return node

    def _call(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # ---- healing --------------------------------------------------------------------------------------
    def alone(self) -> bool:
        """Whether the last fetch found no other peer's records."""
        return self.peers_seen == 0

    async def _maintain(self) -> None:
        """Re-announces to the initial peers every reannounce_every seconds; while alone, sooner, doubling."""
        retry = ALONE_FIRST_RETRY
        while True:
            alone = self.alone()
            await asyncio.sleep(min(retry, self.settings.reannounce_every) if alone
                                else self.settings.reannounce_every)
            try:
                answered = await self._reannounce(rebootstrap=self.alone())
            except Exception as err:  # noqa: BLE001 (a failed re-announcement is retried, never fatal)
                log.debug("re-announcing failed: %s", err)
                answered = 0
            if alone and answered:
                log.info("no other peer seen: re-announced to %d initial peer(s)", answered)
            retry = retry * 2 if self.alone() else ALONE_FIRST_RETRY

    async def _reannounce(self, rebootstrap: bool) -> int:
        """Pings every initial peer (each learns us again, e.g. after its own restart); when `rebootstrap`,
        also looks up our own id, which refills our routing table from theirs."""
        from hivemind.p2p import PeerID
        from hivemind.utils.multiaddr import Multiaddr

        peers = {PeerID.from_base58(Multiaddr(m)["p2p"]) for m in self.settings.initial_peers}
        pings = [self._node.protocol.call_ping(peer, validate=False, strict=False) for peer in peers]
        answered = sum(r is not None for r in await asyncio.gather(*pings, return_exceptions=True)
                       if not isinstance(r, BaseException))
        if rebootstrap and answered:
            await self._node.find_nearest_nodes([self._node.node_id])
        return answered

    @property
    def own_subkey(self) -> bytes:
        return self.validator.local_public_key

    def owns(self, subkey: bytes, peer_id: str) -> bool:
        return bool(peer_id) and peer_id_of(subkey) == peer_id

    @property
    def peer_id(self) -> str:
        return str(self._node.peer_id)

    def visible_maddrs(self) -> list[str]:
        return [str(m) for m in self._call(self._node.get_visible_maddrs(), timeout=10)]

    def now(self) -> float:
        from hivemind.utils.timed_storage import get_dht_time

        return get_dht_time()

    def publish_async(self, kind: str, value: bytes, ttl: float):
        """Stores our record of this kind (replacing our previous one), without waiting: a concurrent future,
        True when a node took it."""
        self._check_size(kind, value)
        return asyncio.run_coroutine_threadsafe(self._store(kind, value, ttl), self._loop)

    def _check_size(self, kind: str, value: bytes) -> None:
        if len(value) > self.max_value_bytes:
            raise ValueError(f"{kind} record of {len(value)} bytes exceeds the limit of "
                             f"{self.max_value_bytes} bytes (hivemind drops values above 4 MiB silently)")

    def _store(self, kind: str, value: bytes, ttl: float):
        """The store of our record of this kind, as a coroutine (its expiration after any we stored before)."""
        expiration = max(self.now() + ttl, self._published.get(kind, 0.0) + 1e-3)
        self._published[kind] = expiration
        return self._node.store(record_key(self.settings.name, kind), value, expiration, subkey=self.own_subkey)

    # ---- announcements ---------------------------------------------------------------------------------------
    @property
    def shard(self) -> int:
        """The announcement shard this identity writes to."""
        return announcement_shard(self.own_subkey)

    def announce_async(self, value: bytes, ttl: float, levels=(0,)):
        """Replaces our announcement in our shards at these levels (directory.py's `writes`); a concurrent future,
        True when each was stored."""
        self._check_size("announcement", value)

        async def both():
            stored = await asyncio.gather(*(self._store(announcement_kind(s), value, ttl)
                                            for s in chosen_shards(self.own_subkey, levels)))
            return all(stored)

        return asyncio.run_coroutine_threadsafe(both(), self._loop)

    def fetch_shards_async(self, shards):
        """Other peers' live announcements in the given shards, fetched concurrently: a concurrent future of
        {subkey: (announcement, expiration)}. A shard's search stops at the first replica holding a fresh value
        (READ_FRESH_WITHIN); after READ_TIMEOUT the shards still searched are abandoned and the read returns what
        the others found (TimeoutError when the search could not even start)."""
        async def fetch_all():  # one multi-key search: each node is asked once for all the shards it holds
            keys = [record_key(self.settings.name, announcement_kind(i)) for i in shards]
            found: dict = {}
            withdrawn: set = set()
            fresh = self.now() + self.settings.record_ttl - READ_FRESH_WITHIN
            deadline = time.monotonic() + READ_TIMEOUT
            searches = await asyncio.wait_for(self._node.get_many(keys, sufficient_expiration_time=fresh,
                                                                  return_futures=True), READ_TIMEOUT)
            _, late = await asyncio.wait(list(searches.values()), timeout=max(deadline - time.monotonic(), 0.01)) \
                if searches else (set(), set())
            for search in late:  # (silent DHT nodes hold them: what the others found is returned)
                search.cancel()
            for search in searches.values():
                got = None if search.cancelled() or search.exception() is not None else search.result()
                if got is not None and isinstance(got.value, dict):
                    found.update(live_values(got.value, self.own_subkey))
                    withdrawn.update(k for k, item in got.value.items() if item.value == b"")
            if found or len(shards) == ANNOUNCE_SHARDS:  # healing watches whether anyone else is out there
                self.peers_seen = len(found)
            return Records(found, withdrawn - set(found))

        return asyncio.run_coroutine_threadsafe(fetch_all(), self._loop)

    # ---- bundles, peer to peer (serving and pulling: streams.py) ----------------------------------------------
    # ---- what streams.py and relay.py need of hivemind (this module is its only importer) ----------------------
    @staticmethod
    def _peer_ref(peer_id: str):
        """hivemind's PeerID of a base58 peer id."""
        from hivemind.p2p import PeerID

        return PeerID.from_base58(peer_id)

    async def _connect(self, target, addresses: list[str]) -> None:
        """Asks our daemon to connect to `target` at these addresses."""
        from hivemind.utils.multiaddr import Multiaddr

        await self._node.p2p._client.connect(target, [Multiaddr(m) for m in addresses])

    @staticmethod
    def signature_check(kind: str, signer: bytes):
        """`verify(digest, signature)`: whether the owner of DHT subkey `signer` signed this kind and digest."""
        return signature_check(kind, signer)

    def seeds(self) -> list[tuple[str, tuple[str, ...]]]:
        """(peer id, addresses) whose views a newcomer pulls first: SEED_NEIGHBOURS peers drawn from our DHT
        routing table (found when we joined; the daemon knows their addresses), then our initial peers (a
        bootstrap keeps a view: node/swarm/seeding.py), so that newcomers spread their first pulls over the
        swarm and a bootstrap answers only those whose neighbours did not. The initial peers are parsed once."""
        if self._seeds is None:
            from hivemind.utils.multiaddr import Multiaddr

            by_peer: dict[str, list[str]] = {}
            for maddr in self.settings.initial_peers:
                by_peer.setdefault(Multiaddr(maddr)["p2p"], []).append(maddr)
            self._seeds = [(peer, tuple(maddrs)) for peer, maddrs in by_peer.items()]
        table = {str(p) for p in list(self._node.protocol.routing_table.peer_id_to_uid)}  # (one copy: the loop
        if len(self._neighbours) < SEED_NEIGHBOURS or not table.issuperset(self._neighbours):  # thread adds to it)
            candidates = sorted(table - {peer for peer, _ in self._seeds} - {self.peer_id})
            self._neighbours = random.sample(candidates, min(SEED_NEIGHBOURS, len(candidates)))  # kept while
        return [(peer, ()) for peer in self._neighbours] + list(self._seeds)  # they stay in the table

    def withdraw(self, timeout: float = 5.0) -> None:
        """Replaces each of our records with an empty tombstone (a later expiration wins in hivemind); waits at
        most `timeout` seconds in all."""
        stores = []
        for kind, expiration in list(self._published.items()):
            tomb_expiration = max(expiration, self.now()) + 1.0
            stores.append(asyncio.run_coroutine_threadsafe(self._node.store(
                record_key(self.settings.name, kind), b"", tomb_expiration, subkey=self.own_subkey), self._loop))
        deadline = time.monotonic() + timeout
        for future in stores:
            try:
                future.result(timeout=max(deadline - time.monotonic(), 0.01))
            except TimeoutError:
                log.warning("withdrawing our records timed out; they will expire by themselves")
                break
        self._published.clear()

    def cpu_seconds(self) -> tuple[float, float]:
        """(our DHT thread's CPU seconds, our p2pd daemon's), in all."""
        child = getattr(getattr(self._node, "p2p", None), "_child", None)
        return thread_cpu(self._thread), process_cpu(child.pid if child is not None else None)

    def shutdown(self) -> None:
        """Stops the node; bounded in time and never raises (a stuck daemon is killed)."""
        self._closing = True
        self._maintenance.cancel()
        try:
            self._call(self._node.shutdown(), timeout=10)
        except Exception as err:  # noqa: BLE001 (shutting down must always finish)
            log.warning("the DHT did not shut down cleanly (%s); killing its daemon", first_line(err))
            child = getattr(self._node.p2p, "_child", None)
            kill_pids({child.pid} if child is not None and child.returncode is None else set())
        finally:
            self._stop_loop()
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
        if self._identity_dir is not None:
            shutil.rmtree(self._identity_dir, ignore_errors=True)

    def _stop_loop(self, close: bool = True) -> None:
        try:
            self._call(_cancel_pending(), timeout=5)
        except Exception as err:  # noqa: BLE001 (the loop is stopped below in any case)
            log.debug("cancelling the DHT's tasks: %s", first_line(err))
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if close and not self._thread.is_alive():
                self._loop.close()




def live_values(items: dict, own: bytes) -> dict[bytes, tuple[bytes, float]]:
    """Other peers' non-empty values of a DHT dictionary: {subkey: (value, expiration)}."""
    return {subkey: (item.value, item.expiration_time) for subkey, item in items.items()
            if subkey != own and isinstance(item.value, bytes) and item.value}


async def _cancel_pending() -> None:
    """Cancels hivemind's background tasks so the loop stops cleanly."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
