"""Discovery at 100 to 10,000 peers: every honest peer runs the node's own discovery step
(node/swarm/discovery.py: its views, seeds, pushes, refill, directory reads and choice of senders, with the real
membership, sender ledger and directory) over a simulated network, round by round (one round = one step); the
bootstrap runs the node's own seed view (node/swarm/seeding.py).

What is simulated is the network and the other parties, through the transport the node calls (`SimTransport`):
- a request is answered within the round when latency + bytes / bandwidth fits SHUFFLE_DEADLINE, else it fails
  (a miss); a peer serves its view to at most SERVES_PER_BUNDLE["view"] peers a round, then answers "busy"
  (`--no-serve-cap`: to all);
- honest peers leave and join at `--churn` an hour (a leaver's address refuses connections at once); a joiner has
  2 DHT nodes drawn at random as its routing-table neighbours (honest, silent or Sybil alike), its first seeds,
  then the bootstrap (`--seeding bootstrap`: the bootstrap only);
- silent peers (`--silent`): they announce every round and never answer;
- Sybil identities (`--sybil`, a share of all identities): one coordinated attacker that knows every honest peer
  and, each round, pushes to every one as many Sybil identities as pass the push limit with the honest pushes
  expected (PUSH_LIMIT - PUSH_FANOUT; with no limit, PUSH_SLOTS: what a view takes of pushes), answers every view
  pull with Sybil entries (its own first), writes its announcements at every shard level, and serves groups that
  teach nothing;
- the DHT: every identity stores its announcement each round in the shards its peer writes (node: the level its
  directory chose), on REPLICAS holders per shard; a read is answered by one holder (`--no-directory`: the DHT
  answers honest peers' reads with nothing);
- a group pull answered is scored as the exchange scores it (informative share 0.8 for an honest sender, 0 for a
  Sybil: its groups never establish it).
Signatures are not computed: every entry verifies (the Sybils' are their own), and each check is charged the
measured cost of decoding and verifying a real signed announcement (RSA-2048). `--no-defences` is the control:
peers' views have no samplers and no push limit.

Per round and per honest peer it measures discovery bytes in and out (a real signed announcement's size), CPU
(this process's time in the node's discovery code, plus the checks x their measured cost), group pulls received
(in-degree), the Sybil share of views, samplers and group pulls, requests to silent peers, the DHT nodes' load, and
for the probe newcomers (`--newcomers`, joining after the warm-up) the rounds to a first received group and to 8
distinct answering senders. Prints a table row per N (busiest peer: the median over rounds of each round's
busiest, and the worst round's; the 99th percentile of all honest peer-rounds of the measured rounds) with the
simulation's wall time, and draws docs/plots/discovery.png.

    .venv/bin/python -m bench.sim.discovery [--peers 100 1000 10000] [--rounds 40] [--warmup 15]
"""
from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from node.config import SwarmConfig
from node.swarm import SERVES_PER_BUNDLE, Records
from node.swarm import membership as ms
from node.swarm.directory import ESTIMATE_EVERY, read_plan, write_level
from node.swarm.discovery import Discovery
from node.swarm.gossip import Held
from node.swarm.membership import Entry
from node.swarm.memory import done, failed
from node.swarm.seeding import SeedView
from node.swarm.senders import SenderLedger
from protocol import SHARD_LEVELS
from protocol.codec import (
    Announcement,
    BundleRef,
    RecordError,
    SwarmTask,
    WireCard,
    announcement_shards,
    decode_announcement,
    encode_announcement,
)
from protocol.view import MAX_VIEW_ENTRIES, SignedAnnouncement, pack_view, unpack_view

ROOT = Path(__file__).resolve().parents[2]

REQUEST_BYTES = 120  # a pull or push request's framing (kind, version, stream header)
SHUFFLE_DEADLINE = 1.0
REPLICAS = 5  # DHT nodes holding each key (node/swarm/dht.py's num_replicas)
TASK = SwarmTask("digits", "1", 64)
CARD = WireCard(family="qwen2", n_params=1, lora=False, tokenizer="t", vocab_size=64, backend="transformers",
                temperature=1.0, top_p=1.0, software="sim")


def real_entry_cost(repeats: int = 200) -> tuple[int, float]:
    """(bytes of one signed announcement as gossiped: value + owner key + signature, seconds to decode and
    verify one), measured on a real announcement and a real RSA-2048 key."""
    from hivemind.utils.crypto import RSAPrivateKey

    from protocol.codec import bundle_digest, bundle_statement

    key = RSAPrivateKey()
    card = WireCard(family="qwen2", n_params=2_900_000, lora=False, tokenizer="f" * 16, vocab_size=64,
                    backend="transformers", temperature=1.0, top_p=1.0, software="0.1.0")
    ann = Announcement("12D3KooW" + "x" * 44, tuple(f"/ip4/10.0.0.{i}/tcp/4{i}000/p2p/12D3KooW" + "x" * 44
                                                    for i in range(4)), 1234, time.time(), card,
                       BundleRef(b"d" * 16, 40_000, 128), BundleRef(b"e" * 16, 900, 16), model="digit-add",
                       credits=tuple((f"12D3KooW{i:044d}", 100 + i) for i in range(8)), accuracy=0.3, task=TASK)
    value = encode_announcement(ann)
    public = key.get_public_key().to_bytes()
    subkey = b"[owner:" + public + b"]"
    signature = key.sign(bundle_statement("ann", bundle_digest(value)))
    size = len(value) + len(subkey) + len(signature) + 8
    public_key = type(key.get_public_key()).from_bytes(public)
    start = time.perf_counter()
    for _ in range(repeats):
        decode_announcement(value)
        assert public_key.verify(bundle_statement("ann", bundle_digest(value)), signature)
    return size, (time.perf_counter() - start) / repeats


@dataclass
class Node:
    """One identity of the simulated swarm (an honest peer runs the node's Discovery; the others are modelled)."""
    subkey: bytes
    kind: str  # honest, silent, sybil, bootstrap
    joined: int
    probe: bool = False
    gone: bool = False
    transport: SimTransport | None = None
    discovery: Discovery | None = None
    seed_view: SeedView | None = None  # the bootstrap's
    neighbours: list = field(default_factory=list)  # its DHT routing-table neighbours (seeds)
    value: bytes = b""  # its announcement this round
    served: bytes = b""  # its view bundle as served this round
    served_entries: int = 0
    hellos: list = field(default_factory=list)  # peer ids that pushed to it since its last step
    first_group: int | None = None  # round of the first group received from an honest sender (probe newcomers)
    full: int | None = None  # round it had pulled from 8 distinct honest senders
    pulled_from: set = field(default_factory=set)
    flooded: int = 0  # its gossip's flooded count at the last round

    @property
    def peer_id(self) -> str:
        return self.subkey.hex()


class SimTransport:
    """What the node's discovery calls of the network (node/swarm/__init__.py's SwarmTransport), answered by the
    simulated swarm within the round."""

    def __init__(self, sim: Sim, node: Node):
        self.sim, self.node = sim, node
        self.own_subkey, self.peer_id = node.subkey, node.peer_id
        self.relay_owners = None

    def now(self) -> float:
        return self.sim.now()

    def owns(self, subkey: bytes, peer_id: str) -> bool:
        return subkey.hex() == peer_id

    def serve(self, kind: str, bundle: bytes) -> bytes:
        if kind == "view":
            self.node.served, self.node.served_entries = bundle, len(unpack_view(bundle))
        return b"\0" * 16

    def signature(self, kind: str, digest: bytes) -> bytes:
        return b""

    def verify(self, kind: str, digest: bytes, signature: bytes, signer: bytes) -> bool:
        self.sim.validated[self.node.subkey] += 1
        return True

    def pull_async(self, peer_id: str, kind: str, digest: bytes, max_bytes: int, timeout: float, maddrs=(),
                   signer: bytes | None = None, via: str = "") -> Future:
        return self.sim.request(self.node, peer_id, kind)

    def hello_async(self, peer_id: str, maddrs=(), timeout: float = 5.0) -> Future:
        return self.sim.request(self.node, peer_id, "hello")

    def take_hellos(self) -> list[str]:
        hellos, self.node.hellos = self.node.hellos, []
        return hellos

    def seeds(self) -> list[tuple[str, tuple[str, ...]]]:
        boot = [(self.sim.bootstrap.peer_id, ())]
        if self.sim.seeding == "bootstrap":
            return boot
        return [(self.sim.nodes[s].peer_id, ()) for s in self.node.neighbours] + boot

    def fetch_shards_async(self, shards: list[int]) -> Future:
        return done(self.sim.read(self.node, shards))


class Sim:
    def __init__(self, n: int, args, entry_bytes: int, validate_s: float, seed: int, seeding: str = "neighbours"):
        self.args, self.rng, self.seeding = args, random.Random(seed), seeding
        self.entry_bytes, self.validate_s = entry_bytes, validate_s
        self.step_s = args.step_seconds
        self.cfg = SwarmConfig(max_age=args.ttl, record_ttl=args.ttl)
        self.nodes: dict[bytes, Node] = {}
        self.by_id: dict[str, Node] = {}
        self.round, self.size = 0, n
        self.decoded: dict[bytes, Announcement] = {}  # announcement bytes -> fields (shared by every peer's checks)
        self.shard_cache: dict[bytes, tuple[int, ...]] = {}
        self.largest_read = 0  # announcements in the largest single directory read of a newcomer (measured rounds)
        self.bytes_in, self.bytes_out, self.cpu, self.validated = Counter(), Counter(), Counter(), Counter()
        self.store_bytes, self.node_bytes, self.node_sybil, self.view_serves = Counter(), Counter(), Counter(), \
            Counter()
        self.group_pulls: list[tuple[Node, Node, bool]] = []  # (puller, sender, answered) this round
        self.silent_asks = self.busy = 0
        n_sybil, n_silent = round(n * args.sybil), round(n * args.silent)
        for kind, count in (("honest", n - n_sybil - n_silent), ("silent", n_silent), ("sybil", n_sybil)):
            for _ in range(count):
                self.add(kind)
        self.sybils = [p for p in self.nodes.values() if p.kind == "sybil"]
        self.bootstrap = self.add("bootstrap")
        others = [p.subkey for p in self.nodes.values() if p.kind != "bootstrap"]
        self.holders = {shard: self.rng.sample(others, REPLICAS) for shard in range(sum(SHARD_LEVELS))}
        self.announce_all()
        self.shards = self.shard_map(settled=True)
        for _ in range(round(args.ttl / self.step_s)):  # the bootstrap has been running a while
            self.bootstrap.seed_view.round()
        self.settle()
        self.stats: list[dict] = []
        self.pooled: dict[str, list[float]] = {"bytes": [], "cpu": [], "checks": [], "code": [], "node": []}

    # ---- the population -------------------------------------------------------------------------------------
    def add(self, kind: str, probe: bool = False) -> Node:
        node = Node(self.rng.randbytes(16), kind, self.round, probe=probe)
        self.nodes[node.subkey] = node
        self.by_id[node.peer_id] = node
        if kind in ("honest", "bootstrap"):
            node.transport = SimTransport(self, node)
        if kind == "honest":
            options = {} if self.args.defences else dict(samplers=0, push_limit=10**9)
            node.discovery = Discovery(node.transport, self.cfg, SenderLedger(4096, random.Random(self.rng.random())),
                                       random.Random(self.rng.random()), TASK, lambda card: "", {"groups": 1},
                                       random.Random(self.rng.random()), membership=options, decode=self.decode)
        elif kind == "bootstrap":
            node.seed_view = SeedView(node.transport, self.cfg, random.Random(self.rng.random()))
        return node

    def settle(self) -> None:
        """The starting population has been in the swarm a while: each peer's view holds a sample of the directory
        (as its first seed's answer brought it), learned as senders, and it has read 8 shards at the level of the
        swarm's size, at a random point of its refresh cycle."""
        live = [p for p in self.nodes.values() if p.kind != "bootstrap"]
        now = self.now()
        for peer in self.honest():
            d = peer.discovery
            entries = [self.entry(p) for p in self.rng.sample(live, min(len(live), ms.SAMPLE_SIZE))]
            d.gossip.membership.seed([e for e in entries if e.subkey != peer.subkey])
            for e in entries:
                d.ledger.learn(e.subkey, e.payload.announcement, e.expires, now)
            directory = d.directory
            directory.reading = directory.rotation(8, *read_plan(self.size))
            directory.note_read(sum(len(self.shards.get(s, ())) for s in directory.reading))
            directory.idle = self.rng.randrange(ESTIMATE_EVERY)

    def join(self, probe: bool = False) -> Node:
        """A newcomer (during a round), with 2 DHT nodes drawn as its routing-table neighbours."""
        nodes = [s for s, p in self.nodes.items() if p.kind != "bootstrap" and not p.gone]
        peer = self.add("honest", probe=probe)
        peer.neighbours = self.rng.sample(nodes, min(2, len(nodes)))
        self.announce(peer)
        return peer

    def now(self) -> float:
        return self.round * self.step_s

    def honest(self) -> list[Node]:
        return [p for p in self.nodes.values() if p.kind == "honest" and not p.gone]

    # ---- announcements and the DHT --------------------------------------------------------------------------
    def announce(self, node: Node) -> None:
        """The node's announcement this round (silent peers keep announcing: the worst case, they never expire)."""
        a = Announcement(node.peer_id, (), self.round, self.now(), CARD, BundleRef(b"g" * 16, 40_000, 16),
                         BundleRef(b"s" * 16, 900, 16), task=TASK)
        node.value = encode_announcement(a)
        self.decoded[node.value] = a

    def announce_all(self) -> None:
        for node in self.nodes.values():
            if node.kind != "bootstrap" and not node.gone:
                self.announce(node)
        old = self.now() - self.args.ttl - 2 * self.step_s
        self.decoded = {v: a for v, a in self.decoded.items() if a.created >= old}

    def decode(self, value: bytes) -> Announcement:
        """An announcement's fields: the sim's own encodings are shared (10,000 peers' checks would each hold a
        copy); anything else decoded by the codec."""
        known = self.decoded.get(value)
        return known if known is not None else decode_announcement(value)

    def entry(self, node: Node) -> Entry:
        a = self.decoded[node.value]
        return Entry(node.subkey, a.created, a.created + self.args.ttl,
                     Held(SignedAnnouncement(node.subkey, node.value, b""), a))

    def shards_of(self, subkey: bytes) -> tuple[int, ...]:
        if subkey not in self.shard_cache:
            self.shard_cache[subkey] = announcement_shards(subkey)
        return self.shard_cache[subkey]

    def written(self, node: Node, settled: bool = False) -> tuple[int, ...]:
        """The shards an identity writes to this round: an honest peer at the level its directory chose (settled:
        the level of the swarm's true size), a silent one as an honest peer that knew the size, Sybils at every
        level (the attacker's choice)."""
        own = self.shards_of(node.subkey)
        if node.kind == "sybil":
            return own
        levels = (write_level(self.size),) if node.discovery is None or settled else node.discovery.directory.writes()
        return tuple(own[level] for level in levels)

    def shard_map(self, settled: bool = False) -> dict[int, dict[bytes, tuple[bytes, float]]]:
        """The DHT's live announcements by shard, as written this round; each store charged to its writer and to
        the shard's REPLICAS holders."""
        shards: dict = {}
        expires = self.now() + self.args.ttl
        for node in self.nodes.values():
            if node.kind == "bootstrap" or node.gone:
                continue
            for shard in self.written(node, settled):
                shards.setdefault(shard, {})[node.subkey] = (node.value, expires)
                self.store_bytes[node.subkey] += REPLICAS * self.entry_bytes
                for holder in self.holders[shard]:
                    self.node_bytes[holder] += self.entry_bytes
                    if node.kind == "sybil":
                        self.node_sybil[holder] += self.entry_bytes
        return shards

    def read(self, node: Node, shards: list[int]) -> Records:
        """A directory read: every live announcement of these shards, each from one of the shard's holders."""
        if not self.args.directory and node.kind == "honest":
            return Records()
        records = {}
        for shard in shards:
            holder = self.rng.choice(self.holders[shard])
            found = self.shards.get(shard, {})
            self.node_bytes[holder] += len(found) * self.entry_bytes
            records.update(found)
        self.bytes_in[node.subkey] += len(records) * self.entry_bytes
        self.validated[node.subkey] += len(records)
        if node.joined > 0 and self.measuring:
            self.largest_read = max(self.largest_read, len(records))
        return Records(records)

    # ---- requests -------------------------------------------------------------------------------------------
    def delivered(self, target: Node, size: int) -> bool:
        """Whether a request to target is answered within the deadline."""
        if target.gone or target.kind == "silent":
            return False
        latency = self.rng.uniform(*self.args.latency)
        return latency + size * 8 / self.args.bandwidth <= SHUFFLE_DEADLINE

    def request(self, node: Node, peer_id: str, kind: str) -> Future:
        """node's request of `kind` ("view", "groups", "hello") to peer_id, answered within the round."""
        target = self.by_id.get(peer_id)
        self.bytes_out[node.subkey] += REQUEST_BYTES
        if target is None:
            return failed(ConnectionError("no such peer"))
        if kind == "view":
            entries = MAX_VIEW_ENTRIES if target.kind == "sybil" else target.served_entries
            size = REQUEST_BYTES + entries * self.entry_bytes
        else:
            size = REQUEST_BYTES
        if not self.delivered(target, size):
            self.silent_asks += target.kind == "silent" and node.kind == "honest"
            if kind == "groups":
                self.group_pulls.append((node, target, False))
            return failed(TimeoutError("no answer within the deadline"))
        self.bytes_in[target.subkey] += REQUEST_BYTES
        if kind == "hello":
            target.hellos.append(node.peer_id)
            return done(b"")
        if kind == "groups":
            self.group_pulls.append((node, target, True))
            return done(b"")
        if target.kind == "sybil":
            answer = self.sybil_view(target)
        else:
            if self.args.serve_cap and self.view_serves[target.subkey] >= SERVES_PER_BUNDLE["view"]:
                self.busy += node.kind == "honest"
                return failed(RecordError("busy", "served to enough peers this round"))
            self.view_serves[target.subkey] += 1
            answer = target.served
        self.bytes_out[target.subkey] += size - REQUEST_BYTES
        self.bytes_in[node.subkey] += size - REQUEST_BYTES
        return done(answer)

    def sybil_view(self, sybil: Node) -> bytes:
        """The attacker's answer to a view pull: the Sybil's own entry, then other Sybils'."""
        others = self.rng.sample(self.sybils, min(MAX_VIEW_ENTRIES, len(self.sybils)))
        chosen = [sybil] + [s for s in others if s is not sybil][:MAX_VIEW_ENTRIES - 1]
        return pack_view([SignedAnnouncement(s.subkey, s.value, b"") for s in chosen])

    def timed(self, node: Node, fn, *args):
        """fn(*args), its CPU time charged to node."""
        start = time.thread_time()  # (CPU time: a wall clock would charge the peer whatever else this shared
        try:  #                         machine ran meanwhile)
            return fn(*args)
        finally:
            self.cpu[node.subkey] += time.thread_time() - start

    # ---- a round --------------------------------------------------------------------------------------------
    def step(self, measure: bool, newcomers: int = 0) -> list[Node]:
        """One round; `newcomers` probe peers join at its start (returned)."""
        self.round += 1
        self.measuring = measure
        now, args = self.now(), self.args
        self.bytes_in, self.bytes_out, self.cpu, self.validated = Counter(), Counter(), Counter(), Counter()
        self.store_bytes, self.node_bytes, self.node_sybil, self.view_serves = Counter(), Counter(), Counter(), \
            Counter()
        self.group_pulls, self.silent_asks, self.busy = [], 0, 0
        self.announce_all()
        probes = [self.join(probe=True) for _ in range(newcomers)]
        churn = args.churn * self.step_s / 3600
        for peer in self.honest():
            if not peer.probe and self.rng.random() < churn:
                peer.gone = True
                self.join()
        honest = self.honest()
        reject = lambda sender, reason, detail: None  # noqa: E731 (the sim counts no refusals: none are sent)
        for peer in honest:  # publish: a sample of its view served with its announcement
            peer.discovery.ledger.begin_step(self.round)
            self.timed(peer, peer.discovery.serve, peer.value, now)
        self.shards = self.shard_map()
        self.timed(self.bootstrap, self.bootstrap.seed_view.round)
        if self.sybils:  # the attacker: as many pushes per honest peer as pass the limit with the honest ones
            pushes = ms.PUSH_LIMIT - ms.PUSH_FANOUT if args.defences else ms.PUSH_SLOTS  # (no limit: a view's fill)
            for peer in honest:
                for sybil in self.rng.sample(self.sybils, min(pushes, len(self.sybils))):
                    self.bytes_in[peer.subkey] += REQUEST_BYTES
                    peer.hellos.append(sybil.peer_id)
        for peer in honest:
            self.timed(peer, peer.discovery.begin)
        flooded = 0
        for peer in honest:
            d = peer.discovery
            self.timed(peer, d.take_views, reject)
            self.timed(peer, d.read, 0.0, reject)
            self.timed(peer, self.score, peer)
            self.timed(peer, d.end)
            flooded += d.gossip.flooded - peer.flooded
            peer.flooded = d.gossip.flooded
        if not measure:
            return probes
        indegree: Counter = Counter(target.subkey for _, target, answered in self.group_pulls if answered)
        pulls = [(p, t) for p, t, _ in self.group_pulls if p.kind == "honest"]
        self.record(honest, indegree, sum(t.kind == "sybil" for _, t in pulls) / max(len(pulls), 1), flooded)
        return probes

    def score(self, peer: Node) -> None:
        """The group pulls that finished, scored as the exchange scores what they brought."""
        d = peer.discovery
        for sender, _, bundle, _ in d.pulls.finished():
            if isinstance(bundle, BaseException):
                d.ledger.failed(sender, self.round)
                continue
            target = self.nodes[sender]
            d.ledger.succeeded(sender, 0.0 if target.kind == "sybil" else 0.8)
            if target.kind == "honest":
                peer.pulled_from.add(sender)
                if peer.first_group is None:
                    peer.first_group = self.round - peer.joined + 1
                if peer.full is None and len(peer.pulled_from) >= self.cfg.pull_peers:
                    peer.full = self.round - peer.joined + 1

    def record(self, honest: list[Node], indegree: Counter, pull_sybil: float, flooded: int) -> None:
        now = self.now()
        ids = [p.subkey for p in honest]
        sybil_set = {p.subkey for p in self.sybils}
        views = [p.discovery.gossip.membership.members(now) for p in honest]
        view_sybil = sum(sum(e.subkey in sybil_set for e in v) for v in views) / max(sum(map(len, views)), 1)
        samples = [p.discovery.gossip.membership.sampled() for p in honest]
        sampler_sybil = sum(sum(e.subkey in sybil_set for e in s) for s in samples) / max(sum(map(len, samples)), 1)
        honest_in = [indegree[s] for s in ids]
        cpu = {s: self.cpu[s] + self.validated[s] * self.validate_s for s in [*ids, self.bootstrap.subkey]}
        boot = self.bootstrap.subkey
        for s in ids:  # (every honest peer's round, pooled over the measured rounds: the tail's quantiles)
            self.pooled["bytes"].append(self.bytes_in[s] + self.bytes_out[s])
            self.pooled["cpu"].append(cpu[s])
            self.pooled["checks"].append(self.validated[s])
            self.pooled["code"].append(self.cpu[s])
            self.pooled["node"].append(self.node_bytes[s] - self.node_sybil[s])
        self.stats.append(dict(
            bytes_in=statistics.median(self.bytes_in[s] for s in ids),
            bytes_out=statistics.median(self.bytes_out[s] for s in ids),
            bytes_max=max(self.bytes_in[s] + self.bytes_out[s] for s in ids),
            cpu=statistics.median(cpu[s] for s in ids), cpu_max=max(cpu[s] for s in ids),
            code_max=max(self.cpu[s] for s in ids), validated_max=max(self.validated[s] for s in ids),
            boot_bytes=self.bytes_in[boot] + self.bytes_out[boot], boot_cpu=cpu[boot],
            indegree_mean=statistics.mean(honest_in), indegree_max=max(honest_in),
            view_sybil=view_sybil, sampler_sybil=sampler_sybil, pull_sybil=pull_sybil,
            silent_asks=self.silent_asks / len(honest), flooded=flooded / len(honest), busy=self.busy / len(honest),
            store=statistics.median(self.store_bytes[s] for s in ids),
            node_max=max(self.node_bytes[s] for s in ids), node_mean=statistics.mean(self.node_bytes[s] for s in ids),
            node_max_honest=max(self.node_bytes[s] - self.node_sybil[s] for s in ids),
            view=statistics.mean(map(len, views))))


def run(n: int, args, entry_bytes: int, validate_s: float, seed: int, seeding: str = "neighbours") -> dict:
    wall = time.perf_counter()
    sim = Sim(n, args, entry_bytes, validate_s, seed, seeding)
    probes: list[Node] = []
    gc.disable()  # (collected between rounds: a collection of this large heap inside a peer's timed code would be
    try:  #         charged to that peer as seconds of CPU; what survives a round's collection is frozen, so the
        for r in range(args.rounds):  # next one walks only what the round made: a fifth of the run's time before)
            gc.collect()
            gc.freeze()
            measuring = r >= args.warmup
            if r == args.warmup:
                sim.largest_read = 0
            joining = 0
            if measuring and len(probes) < args.newcomers and r < args.rounds - 6:
                joining = max(1, args.newcomers // (args.rounds - 6 - args.warmup))
            probes += sim.step(measuring, joining)
            if (r + 1) % 10 == 0 or r + 1 == args.rounds:
                print(f"  N={n}: round {r + 1}/{args.rounds} ({time.perf_counter() - wall:.0f} s)", file=sys.stderr,
                      flush=True)
    finally:
        gc.unfreeze()
        gc.enable()
    s = sim.stats
    first = [p.first_group for p in probes if p.first_group is not None]
    full = [p.full for p in probes if p.full is not None]
    med = {k: statistics.median(row[k] for row in s) for k in s[0]}
    med.update(n=n, seeding=seeding, probes=len(probes), first=first, full=full, first_missing=len(probes) - len(first),
               full_missing=len(probes) - len(full), wall=time.perf_counter() - wall,
               view_sybil_last=s[-1]["view_sybil"], indegree_max_max=max(r["indegree_max"] for r in s),
               bytes_worst=max(r["bytes_max"] for r in s), cpu_worst=max(r["cpu_max"] for r in s),
               largest_read=sim.largest_read)
    med.update({f"{k}_p99": tail(v, 0.99) for k, v in sim.pooled.items()})
    return med


def tail(values: list[float], q: float) -> float:
    """The q-quantile of values (nearest rank): the same share of peer-rounds at every N, where the largest of
    N peers' values is the extreme of ever more draws from one per-peer distribution."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in rows]
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    axes[0].plot(ns, [(r["bytes_in"] + r["bytes_out"]) / 1024 for r in rows], "o-", label="median peer")
    axes[0].plot(ns, [r["bytes_p99"] / 1024 for r in rows], "^:", label="99th percentile")
    axes[0].plot(ns, [r["bytes_max"] / 1024 for r in rows], "s--", label="busiest peer")
    axes[0].set(xscale="log", xlabel="peers", ylabel="discovery KB / step", title="traffic per peer")
    axes[1].plot(ns, [r["cpu"] * 1000 for r in rows], "o-", label="median peer")
    axes[1].plot(ns, [r["cpu_p99"] * 1000 for r in rows], "^:", label="99th percentile")
    axes[1].plot(ns, [r["cpu_max"] * 1000 for r in rows], "s--", label="busiest peer")
    axes[1].set(xscale="log", xlabel="peers", ylabel="ms CPU / step", title="CPU per peer (validation included)")
    axes[2].plot(ns, [r["view_sybil"] for r in rows], "o-", label="views")
    axes[2].plot(ns, [r["sampler_sybil"] for r in rows], "s--", label="samplers")
    axes[2].plot(ns, [r["pull_sybil"] for r in rows], "^:", label="group pulls")
    axes[2].set(xscale="log", xlabel="peers", ylabel="Sybil share", title="Sybil share of honest peers'",
                ylim=(0, 1))
    axes[3].plot(ns, [r["node_mean"] / 1024 for r in rows], "o-", label="mean node")
    axes[3].plot(ns, [r["node_max_honest"] / 1024 for r in rows], "s--", label="busiest (honest stores and reads)")
    axes[3].plot(ns, [r["node_p99"] / 1024 for r in rows], "v-.", label="99th percentile (honest)")
    axes[3].plot(ns, [r["node_max"] / 1024 for r in rows], "^:", label="busiest (Sybils' stores too)")
    axes[3].set(xscale="log", xlabel="peers", ylabel="KB / step", title="DHT nodes' load")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=15, help="rounds before measuring (views mix from a DHT seed)")
    ap.add_argument("--newcomers", type=int, default=20, help="probe newcomers joining after the warm-up")
    ap.add_argument("--churn", type=float, default=0.10, help="share of honest peers replaced an hour")
    ap.add_argument("--silent", type=float, default=0.20)
    ap.add_argument("--sybil", type=float, default=0.10)
    ap.add_argument("--step-seconds", type=float, default=10.0)
    ap.add_argument("--ttl", type=float, default=120.0, help="announcement lifetime (swarm.record_ttl, max_age)")
    ap.add_argument("--latency", type=float, nargs=2, default=(0.02, 0.3), help="one-way, uniform (s)")
    ap.add_argument("--bandwidth", type=float, default=10e6, help="bits/s of a peer's link")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-serve-cap", dest="serve_cap", action="store_false",
                    help="a peer serves its view to every pull (no SERVES_PER_BUNDLE)")
    ap.add_argument("--no-directory", dest="directory", action="store_false",
                    help="the DHT answers honest peers' directory reads with nothing")
    ap.add_argument("--seeding", nargs="+", choices=("neighbours", "bootstrap"), default=["neighbours"],
                    help="newcomers' seeds: their DHT neighbours then the bootstrap (the node), or the bootstrap "
                         "only; several: each N run with each (the plot and the ratios use the first)")
    ap.add_argument("--no-defences", dest="defences", action="store_false",
                    help="control: views with no samplers and no push limit (what the defences are measured "
                         "against)")
    ap.add_argument("--plot", default=str(ROOT / "docs" / "plots" / "discovery.png"), help="'' for none")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    entry_bytes, validate_s = real_entry_cost()
    print(f"one gossiped announcement: {entry_bytes} bytes, decoded and verified in {validate_s * 1e3:.2f} ms; "
          f"view {ms.VIEW_SIZE}, {ms.SAMPLERS} samplers, push {ms.PUSH_FANOUT} / limit {ms.PUSH_LIMIT}, "
          f"pull {ms.PULL_FANOUT} x {ms.SAMPLE_SIZE}; silent {args.silent:.0%}, Sybil {args.sybil:.0%}, churn "
          f"{args.churn:.0%}/h, step {args.step_seconds:g} s; medians over rounds {args.warmup + 1}-{args.rounds}"
          + ("" if args.defences else "; CONTROL: defences off"))
    rows = []
    header = (f"{'seeding':>10} {'peers':>6} {'KB in':>6} {'KB out':>6} {'KB max':>6} {'worst':>6} {'ms CPU':>6} "
              f"{'CPU max':>7} {'worst':>6} {'read max':>8} "
              f"{'in-deg':>6} {'max/mean':>8} {'Sybil view':>10} {'samplers':>8} {'pulls':>6} "
              f"{'silent asks':>11} {'flooded':>7} {'1st group':>9} {'8 senders':>9} {'boot KB':>7} {'boot ms':>7} "
              f"{'store KB':>8} {'node KB max':>11} {'w/o Sybil':>9} {'mean':>6} {'busy':>5} {'checks max':>10} "
              f"{'code ms max':>11} {'p99 KB':>6} {'p99 ms':>6} {'p99 checks':>10} {'p99 node KB':>11} {'sim s':>6}")
    print(header)
    others = []
    for n, seeding in [(n, s) for n in args.peers for s in args.seeding]:
        r = run(n, args, entry_bytes, validate_s, args.seed, seeding)
        (rows if seeding == args.seeding[0] else others).append(r)
        first = f"{statistics.median(r['first']):.0f}/{max(r['first'])}" if r["first"] else "-"
        full = f"{statistics.median(r['full']):.0f}/{max(r['full'])}" if r["full"] else "-"
        print(f"{seeding:>10} {n:>6} {r['bytes_in'] / 1024:>6.1f} {r['bytes_out'] / 1024:>6.1f} "
              f"{r['bytes_max'] / 1024:>6.1f} {r['bytes_worst'] / 1024:>6.1f} "
              f"{r['cpu'] * 1e3:>6.2f} {r['cpu_max'] * 1e3:>7.2f} {r['cpu_worst'] * 1e3:>6.2f} "
              f"{r['largest_read']:>8} {r['indegree_mean']:>6.1f} "
              f"{r['indegree_max_max'] / max(r['indegree_mean'], 1e-9):>8.1f} {r['view_sybil']:>10.3f} "
              f"{r['sampler_sybil']:>8.3f} {r['pull_sybil']:>6.3f} {r['silent_asks']:>11.2f} {r['flooded']:>7.3f} "
              f"{first:>9} {full:>9} {r['boot_bytes'] / 1024:>7.1f} {r['boot_cpu'] * 1e3:>7.2f} "
              f"{r['store'] / 1024:>8.1f} {r['node_max'] / 1024:>11.1f} {r['node_max_honest'] / 1024:>9.1f} "
              f"{r['node_mean'] / 1024:>6.1f} {r['busy']:>5.2f} {r['validated_max']:>10.0f} "
              f"{r['code_max'] * 1e3:>11.2f} {r['bytes_p99'] / 1024:>6.1f} {r['cpu_p99'] * 1e3:>6.2f} "
              f"{r['checks_p99']:>10.0f} {r['node_p99'] / 1024:>11.1f} {r['wall']:>6.0f}",
              flush=True)
        if r["first_missing"] or r["full_missing"]:
            print(f"       of {r['probes']} newcomers: {r['first_missing']} got no group, "
                  f"{r['full_missing']} found fewer than 8 senders within the run")
    base = rows[0]
    for r in rows[1:]:
        ratio_b = (r["bytes_in"] + r["bytes_out"]) / max(base["bytes_in"] + base["bytes_out"], 1)
        print(f"N={r['n']} vs N={base['n']}: bytes per peer {ratio_b:.2f}x, "
              f"CPU per peer {r['cpu'] / base['cpu']:.2f}x, busiest peer bytes "
              f"{r['bytes_max'] / max(base['bytes_max'], 1):.2f}x and CPU {r['cpu_max'] / base['cpu_max']:.2f}x "
              f"(worst round {r['bytes_worst'] / max(base['bytes_worst'], 1):.2f}x, "
              f"{r['cpu_worst'] / base['cpu_worst']:.2f}x), "
              f"99th percentile of peer-rounds bytes {r['bytes_p99'] / max(base['bytes_p99'], 1):.2f}x and CPU "
              f"{r['cpu_p99'] / base['cpu_p99']:.2f}x, "
              f"bootstrap bytes {r['boot_bytes'] / max(base['boot_bytes'], 1):.2f}x, busiest DHT node "
              f"{r['node_max'] / max(base['node_max'], 1):.2f}x ("
              f"{r['node_max_honest'] / max(base['node_max_honest'], 1):.2f}x without the Sybils' stores; 99th "
              f"percentile of node-rounds without them {r['node_p99'] / max(base['node_p99'], 1):.2f}x) "
              f"({args.seeding[0]} seeding)")
    for r in others:
        mine = next(m for m in rows if m["n"] == r["n"])
        print(f"N={r['n']}: bootstrap bytes {args.seeding[0]} / {r['seeding']} seeding "
              f"{mine['boot_bytes'] / max(r['boot_bytes'], 1):.2f}x")
    if args.plot:
        plot(rows, Path(args.plot))
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
