"""Discovery at 100 to 10,000 peers: the real membership (node/swarm/membership.py) and sender selection
(node/swarm/senders.py) over a simulated transport, round by round (one round = one training step).

Every honest peer, each round: pushes its own announcement to PUSH_FANOUT members of its view (NEWCOMER_PUSH_FANOUT
while it is a newcomer, as the node does), asks PULL_FANOUT members for a sample of theirs (SAMPLE_SIZE entries,
their own first), renews its view (Brahms-style), then
picks up to 8 senders among its view's members with the real `SenderLedger.choose` (established senders first,
2 slots for newcomers) and pulls their groups; a pull answered refreshes the sender's entry (the owner's signed
announcement rides with its bundle). The population:
- honest peers, leaving and joining at `--churn` an hour (a leaver's address refuses connections at once);
- silent peers (`--silent`): announced once, then they accept connections and never answer: every request to
  one costs the requester the shuffle time-out (off the step's path), and the peer is evicted (`missed`);
- Sybil identities (`--sybil`, a share of all identities): one coordinated attacker that knows every honest
  peer and, each round, pushes to every one of them as many Sybil announcements as the push limit lets pass
  with the honest pushes expected (PUSH_LIMIT - PUSH_FANOUT), answers every pull with Sybil entries only, and
  serves groups that pass validation and teach nothing (so its identities never become established);
- probe newcomers (`--newcomers`) joining after the warm-up. With `--seeding neighbours` (the node's way), a
  newcomer whose view is empty pulls the views of 2 DHT nodes drawn at random when it joins (its routing-table
  neighbours: honest, silent or Sybil alike), and the bootstrap's sample only once both missed; with
  `--seeding bootstrap` (the node before 2026-12-04), it pulls the bootstrap's sample every round until it has
  2 established senders. (The bootstrap keeps a view like anyone and gossips, but trains nothing.) Like the
  node, a newcomer also reads the DHT directory in rotation while its view holds fewer than 8 entries, about
  READ_BUDGET announcements a round (`--no-read-budget`: 8 of the 64 shards a round, the node before
  2026-12-04), and pulls the senders it finds there (`--no-directory`: it does not, as in the simulation before
  2026-12-04). Its reads take the shards or columns of shards its directory's `read_plan` picks (protocol
  version 4: levels of 64, 256, 1,024 and 4,096 shards; `--coarse-only`: the 64 shards of level 0 only, protocol
  version 2).
Messages are delivered within the round when latency + bytes / bandwidth fits the 1 s shuffle deadline.

Per round and per honest peer it measures: discovery bytes in and out (sizes of real signed announcements: a
zoo card, 4 addresses, 8 credits, an RSA-2048 owner key and signature, measured here), CPU (this process's
time in the membership and selection code, plus the entries validated x the measured cost of decoding and
verifying one), group pulls received (in-degree: max / mean), the Sybil share of honest views, of the samplers
and of group pulls, requests to silent peers, and for the probe newcomers the rounds to a first received
group and to 8 distinct answering senders; its DHT stores (each identity stores its announcement every round
in the shards it writes, on REPLICAS holders drawn per key) and each DHT node's load (stores taken and
announcements served to directory reads); view pulls answered "busy" (SERVES_PER_BUNDLE). Prints one table row
per N (busiest peer: the median over rounds of each round's busiest, and the worst round's; its CPU split into
the most entries one peer checked and the most code time; the 99th percentile of all honest peer-rounds of the
measured rounds, the same share of the tail at every N where the busiest is the largest of ever more draws; the
busiest DHT node with and without the Sybils' stores, and the 99th percentile of honest nodes' rounds without
them) and draws docs/plots/discovery.png.

    .venv/bin/python bench/sim_discovery.py [--peers 100 1000 10000] [--rounds 40] [--warmup 15]
"""
from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from node.config import SwarmConfig  # noqa: E402
from node.swarm import SERVES_PER_BUNDLE  # noqa: E402
from node.swarm import membership as ms  # noqa: E402
from node.swarm.directory import ESTIMATE_EVERY, RESCUE_STEPS, Directory, read_plan, write_level  # noqa: E402
from node.swarm.membership import Entry, Membership  # noqa: E402
from node.swarm.senders import SenderLedger  # noqa: E402
from protocol import SHARD_LEVELS  # noqa: E402
from protocol.codec import Announcement, BundleRef, WireCard, announcement_shards  # noqa: E402

PULL_PEERS, EXPLORE = 8, 2  # the node's swarm.pull_peers and swarm.explore_pulls defaults
REQUEST_BYTES = 120  # a pull or push request's framing (kind, version, stream header)
SHUFFLE_DEADLINE = 1.0
BOOTSTRAP_VIEW = 256  # the bootstrap answers newcomers from this many recently read, answering entries
BOOTSTRAP_READ = 32  # DHT entries the bootstrap reads a round (one shard of a 2,000-peer swarm)
SHARDS_PER_STEP = 8  # the node's swarm.shards_per_step: a newcomer's rotation while its view is not full
REPLICAS = 5  # DHT nodes holding each key (node/swarm/dht.py's num_replicas)


def real_entry_cost(repeats: int = 200) -> tuple[int, float]:
    """(bytes of one signed announcement as gossiped: value + owner key + signature, seconds to decode and
    verify one), measured on a real announcement and a real RSA-2048 key."""
    from hivemind.utils.crypto import RSAPrivateKey

    from protocol.codec import bundle_digest, bundle_statement, decode_announcement, encode_announcement

    key = RSAPrivateKey()
    card = WireCard(family="qwen2", n_params=2_900_000, lora=False, tokenizer="f" * 16, vocab_size=64,
                    backend="transformers", temperature=1.0, top_p=1.0, software="0.1.0")
    ann = Announcement("12D3KooW" + "x" * 44, tuple(f"/ip4/10.0.0.{i}/tcp/4{i}000/p2p/12D3KooW" + "x" * 44
                                                    for i in range(4)), 1234, time.time(), card,
                       BundleRef(b"d" * 16, 40_000, 128), BundleRef(b"e" * 16, 900, 16), model="digit-add",
                       credits=tuple((f"12D3KooW{i:044d}", 100 + i) for i in range(8)), accuracy=0.3)
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


class CoarseDirectory(Directory):
    """A peer's reads as in protocol version 2 (--coarse-only): the coarse shards only, none once the view is full."""
    def __init__(self, *args):
        super().__init__(*args)
        self.plan = (0, False)

    def shards_to_read(self, now: float, known: int, view: int = -1, seeded: bool = False,
                       helping: int = 2) -> list[int]:
        return [] if view >= self.cfg.pull_peers else super().shards_to_read(now, known, view, seeded, helping)

    def rotation(self, count: int, level: int = 0, column: bool = False) -> list[int]:
        return super().rotation(count, 0)

    def note_read(self, announcements: int) -> None:
        super().note_read(announcements)
        self.plan = (0, False)


@dataclass
class Peer:
    subkey: bytes
    kind: str  # honest, silent, sybil, bootstrap
    joined: int
    membership: Membership | None = None
    senders: SenderLedger | None = None
    gone: bool = False
    first_group: int | None = None  # round of the first received group (probe newcomers)
    full: int | None = None  # round it had pulled from PULL_PEERS distinct answering senders
    pulled_from: set = field(default_factory=set)
    probe: bool = False
    held: dict = field(default_factory=dict)  # sender -> its entry as its last answered group pull brought it
    neighbours: list = field(default_factory=list)  # DHT nodes whose views it seeds from (--seeding neighbours)
    missed: set = field(default_factory=set)  # of those, the ones that did not answer
    directory: Directory | None = None  # its directory reads (the node's own), for a newcomer
    read: set = field(default_factory=set)  # senders it learned from its directory reads
    rescued: bool = False  # it asked the bootstrap as a stranded newcomer (seeds())

    def established(self, now: float) -> list[Entry]:
        """Entries of the senders whose groups proved valid and informative here (what we vouch for)."""
        return [self.held[s] for s, st in self.senders.known.items()
                if st.established and s in self.held and self.held[s].expires > now]


class Sim:
    def __init__(self, n: int, args, entry_bytes: int, validate_s: float, seed: int, seeding: str = "neighbours"):
        self.args, self.rng, self.seeding = args, random.Random(seed), seeding
        self.entry_bytes, self.validate_s = entry_bytes, validate_s
        self.step_s = args.step_seconds
        self.peers: dict[bytes, Peer] = {}
        self.card = WireCard(family="qwen2", n_params=1, lora=False, tokenizer="t", vocab_size=64,
                             backend="transformers", temperature=1.0, top_p=1.0, software="sim")
        self.round, self.size = 0, n
        self.shard_cache: dict[bytes, tuple[int, int]] = {}
        self.largest_read = 0  # announcements in the largest single directory read of a newcomer (measured rounds)
        n_sybil = round(n * args.sybil)
        n_silent = round(n * args.silent)
        for kind, count in (("honest", n - n_sybil - n_silent), ("silent", n_silent), ("sybil", n_sybil)):
            for _ in range(count):
                self.add(kind)
        self.bootstrap = self.add("bootstrap")
        self.sybils = [p for p in self.peers.values() if p.kind == "sybil"]
        self.bytes_in, self.bytes_out, self.cpu, self.validated = Counter(), Counter(), Counter(), Counter()
        self.view_serves, self.busy = Counter(), 0
        for _ in range(round(args.ttl / self.step_s)):  # the bootstrap has been running a while
            self.feed_bootstrap(0.0)
        directory = self.directory()
        nodes = [p.subkey for p in self.peers.values() if p.kind != "bootstrap"]
        self.holders = {shard: self.rng.sample(nodes, REPLICAS) for shard in range(sum(SHARD_LEVELS))}
        for peer in self.honest():  # as if each had joined: a sample of the directory (the bootstrap's answer)
            peer.membership.seed(self.rng.sample(directory, min(len(directory), ms.SAMPLE_SIZE)))
            self.give_directory(peer)
        shards = self.shard_map(settled=True)
        for peer in self.honest():  # and had read 8 shards when it joined (its size estimate), at a random
            d = peer.directory  #     point of its refresh cycle
            d.reading = d.rotation(8, *read_plan(n)) if args.fine_shards else d.rotation(8)
            d.note_read(sum(len(shards.get(shard, ())) for shard in d.reading))
            d.idle = self.rng.randrange(ESTIMATE_EVERY)
        self.stats: list[dict] = []
        self.pooled: dict[str, list[float]] = {"bytes": [], "cpu": [], "checks": [], "code": [], "node": []}

    def add(self, kind: str, probe: bool = False) -> Peer:
        subkey = self.rng.randbytes(16)
        peer = Peer(subkey, kind, self.round, probe=probe)
        if kind in ("honest", "bootstrap"):
            size = dict(view_size=BOOTSTRAP_VIEW, samplers=0) if kind == "bootstrap" else \
                {} if self.args.defences else dict(samplers=0, push_limit=10**9)
            peer.membership = Membership(subkey, random.Random(self.rng.random()), **size)
            peer.senders = SenderLedger(4096, random.Random(self.rng.random()))
        self.peers[subkey] = peer
        return peer

    def now(self) -> float:
        return self.round * self.step_s

    def entry(self, peer: Peer) -> Entry:
        """The peer's current announcement (silent peers keep announcing: the worst case, they never expire)."""
        return Entry(peer.subkey, self.now(), self.now() + self.args.ttl, peer)

    def honest(self) -> list[Peer]:
        return [p for p in self.peers.values() if p.kind == "honest" and not p.gone]

    def directory(self) -> list[Entry]:
        """The DHT's live announcements: every identity that announces (Sybil and silent ones included)."""
        return [self.entry(p) for p in self.peers.values() if p.kind != "bootstrap" and not p.gone]

    def delivered(self, target: Peer, size: int) -> bool:
        """Whether a request to target is answered within the shuffle deadline."""
        if target.gone or target.kind == "silent":
            return False
        latency = self.rng.uniform(*self.args.latency)
        return latency + size * 8 / self.args.bandwidth <= SHUFFLE_DEADLINE

    def sybil_sample(self, k: int) -> list[Entry]:
        return [self.entry(p) for p in self.rng.sample(self.sybils, min(k, len(self.sybils)))]

    def seeds(self, peer: Peer, now: float) -> list[bytes]:
        """Whom a peer pulls first: with --seeding neighbours (the node), while its view is empty, its DHT
        neighbours that have not missed, else the bootstrap; with --seeding bootstrap, the bootstrap every round
        while it is a newcomer (the simulation before 2026-12-04)."""
        if self.seeding == "bootstrap":
            return [self.bootstrap.subkey] if self.newcomer(peer) else []
        if peer.joined == 0:
            return []
        if not peer.membership.members(now):
            return [s for s in peer.neighbours if s not in peer.missed] or [self.bootstrap.subkey]
        stranded = 1 <= self.round - peer.joined < RESCUE_STEPS and not any(
            st.informative_pulls for st in peer.senders.known.values())
        if stranded and not peer.rescued and self.args.rescue:  # (the node: the seeds not asked yet, once each)
            peer.rescued = True
            return [self.bootstrap.subkey]
        return []

    def read_directory(self, peer: Peer, now: float, shards: dict) -> None:
        """A newcomer's DHT rotation while its view holds fewer than pull_peers entries: the shards the node's
        own `Directory` asks for (since 2026-12-04 about READ_BUDGET announcements a step), or with
        --no-read-budget the next SHARDS_PER_STEP of the 64. Every live announcement read is downloaded, checked
        and learned as a sender (the answering replica is charged nothing here)."""
        d = peer.directory
        view = len(peer.membership.members(now))
        if self.args.read_budget:
            chosen = d.shards_to_read(now, len(peer.senders.known), view, seeded=True,
                                      helping=sum(st.informative_pulls > 0 for st in peer.senders.known.values()))
        else:
            chosen = d.rotation(SHARDS_PER_STEP) if view < PULL_PEERS else []
        read = 0
        for shard in chosen:  # (ids of any level: `shards` holds every level)
            holder = self.rng.choice(self.holders[shard])  # the read stops at the first fresh replica
            for entry in shards.get(shard, ()):
                self.node_bytes[holder] += self.entry_bytes
                self.bytes_in[peer.subkey] += self.entry_bytes
                self.validated[peer.subkey] += 1
                peer.senders.learn(entry.subkey, self.announcement(entry), entry.expires, now)
                peer.read.add(entry.subkey)
                read += 1
        if chosen:
            d.note_read(read)
            if peer.joined > 0:
                self.largest_read = max(self.largest_read, read)

    def newcomer(self, peer: Peer) -> bool:
        """Joined during the run and fewer than 2 established senders yet: it leans on the bootstrap and takes
        no pushes. (The starting population has been in the swarm a while: its views are a uniform sample of
        the directory; were it all newcomers at once, the bootstrap's 256 would become everyone's first hubs.)"""
        return peer.joined > 0 and sum(st.established for st in peer.senders.known.values()) < 2 \
            and self.args.defences

    def step(self, measure: bool, newcomers: int = 0) -> list[Peer]:
        """One round; `newcomers` probe peers join at its start (returned)."""
        self.round += 1
        now, args = self.now(), self.args
        probes = [self.join(probe=True) for _ in range(newcomers)]
        churn = args.churn * self.step_s / 3600
        for peer in self.honest():
            if not peer.probe and self.rng.random() < churn:
                peer.gone = True
                self.join()
        honest = self.honest()
        self.bytes_in, self.bytes_out, self.cpu, self.validated = Counter(), Counter(), Counter(), Counter()
        self.store_bytes, self.node_bytes, self.view_serves = Counter(), Counter(), Counter()
        self.node_sybil = Counter()  # of node_bytes: the Sybil identities' stores (the attacker's doing)
        self.silent_asks = self.busy = 0
        self.feed_bootstrap(now)
        for peer in honest:  # pushes land in the round they are sent
            fanout = ms.NEWCOMER_PUSH_FANOUT if self.newcomer(peer) else ms.PUSH_FANOUT  # (as the node pushes)
            targets = self.timed(peer, peer.membership.targets, fanout, now)
            for t in targets:
                self.send(peer, self.peers[t], "push")
        if self.sybils:  # the attacker: as many pushes per honest peer as pass the limit, on average
            for peer in [*honest, self.bootstrap]:
                for entry in self.sybil_sample(max(ms.PUSH_LIMIT - ms.PUSH_FANOUT, 0)):
                    self.bytes_in[peer.subkey] += REQUEST_BYTES + self.entry_bytes
                    self.timed(peer, peer.membership.push, entry)
        for peer in honest:
            vouched = [e.subkey for e in peer.established(now)] if self.args.defences else []
            if self.args.defences:
                vouched = self.seeds(peer, now) + vouched
            for t in self.timed(peer, peer.membership.targets, ms.PULL_FANOUT, now, vouched):
                self.send(peer, self.peers[t], "pull")
        flooded = renewed = 0
        indegree: Counter = Counter()
        sybil_pulls = pulls = 0
        self.store(now)
        if self.args.directory:  # (each peer's own Directory decides: a filling view's budgeted reads, a full
            shards = self.shard_map()  # view's shard now and then)
            for peer in honest:
                if args.refill and args.defences and len(peer.membership.members(now)) < PULL_PEERS:
                    self.timed(peer, peer.membership.seed, peer.established(now))  # (the node's Gossip.refill)
                self.timed(peer, self.read_directory, peer, now, shards)
        for peer in honest:
            if peer.membership.pushes <= peer.membership.push_limit:  # (the node checks a pusher's entry only
                self.validated[peer.subkey] += peer.membership.pushes  # when the round is no flood: gossip.hear)
            report = self.timed(peer, peer.membership.end_round, now, not self.newcomer(peer))
            flooded += report.flooded
            renewed += report.renewed
            chosen = self.timed(peer, self.choose, peer, now)
            for s in chosen:
                target = self.peers[s]
                pulls += 1
                sybil_pulls += target.kind == "sybil"
                if self.timed(peer, self.pull_groups, peer, target, now):
                    indegree[s] += 1
        self.timed(self.bootstrap, self.bootstrap.membership.end_round, now, False)
        for peer in honest:  # (bounded: entries of senders no longer known go)
            peer.held = {s: e for s, e in peer.held.items() if s in peer.senders.known}
        if not measure:
            return probes
        ids = [p.subkey for p in honest]
        sybil_set = {p.subkey for p in self.sybils}
        views = [p.membership.members(now) for p in honest]
        view_sybil = sum(sum(e.subkey in sybil_set for e in v) for v in views) / max(sum(map(len, views)), 1)
        samples = [p.membership.sampled() for p in honest]
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
            view_sybil=view_sybil, sampler_sybil=sampler_sybil, pull_sybil=sybil_pulls / max(pulls, 1),
            silent_asks=self.silent_asks / len(honest), flooded=flooded / len(honest), busy=self.busy / len(honest),
            store=statistics.median(self.store_bytes[s] for s in ids),
            node_max=max(self.node_bytes[s] for s in ids), node_mean=statistics.mean(self.node_bytes[s] for s in ids),
            node_max_honest=max(self.node_bytes[s] - self.node_sybil[s] for s in ids),
            view=statistics.mean(map(len, views))))
        return probes

    def shards_of(self, subkey: bytes) -> tuple[int, ...]:
        """The shards an identity announces in, one a level, as the protocol hashes them (cached)."""
        if subkey not in self.shard_cache:
            self.shard_cache[subkey] = announcement_shards(subkey)
        return self.shard_cache[subkey]

    def written(self, peer: Peer, settled: bool = False) -> tuple[int, ...]:
        """The shards an identity writes its announcement to this round: an honest peer at the levels its directory
        says (`writes`), a silent one as an honest peer that knew the swarm's size, Sybils at every level (the
        attacker's choice); protocol version 2: level 0 only. settled: every peer at the levels of the swarm's
        true size (the starting population, in the swarm a while: its estimates have settled)."""
        own = self.shards_of(peer.subkey)
        if not self.args.fine_shards:
            return own[:1]
        if peer.kind == "sybil":
            return own
        levels = (write_level(self.size),) if peer.directory is None or settled else peer.directory.writes()
        return tuple(own[level] for level in levels)

    def shard_map(self, settled: bool = False) -> dict[int, list[Entry]]:
        """The DHT's live announcements by shard (ids of every level), as written this round (settled: written())."""
        shards: dict = {}
        for entry in self.directory():
            for shard in self.written(entry.payload, settled):
                shards.setdefault(shard, []).append(entry)
        return shards

    def give_directory(self, peer: Peer) -> None:
        kind = Directory if self.args.fine_shards else CoarseDirectory
        peer.directory = kind(SwarmConfig(shards_per_step=SHARDS_PER_STEP, pull_peers=PULL_PEERS),
                              self.rng.randrange(SHARD_LEVELS[-1]), lambda card: "")

    def store(self, now: float) -> None:
        """Every identity stores its announcement each round in the shards it writes, on each of a shard's
        REPLICAS holders (charged to the writer's store bytes and to each holder's DHT load)."""
        for peer in self.peers.values():
            if peer.kind == "bootstrap" or peer.gone:
                continue
            for shard in self.written(peer):
                self.store_bytes[peer.subkey] += REPLICAS * self.entry_bytes
                for holder in self.holders[shard]:
                    self.node_bytes[holder] += self.entry_bytes
                    if peer.kind == "sybil":
                        self.node_sybil[holder] += self.entry_bytes

    def timed(self, peer: Peer, fn, *args):
        """fn(*args), its time charged to peer's CPU."""
        start = time.thread_time()  # (CPU time: a wall clock would charge the peer whatever else this shared
        try:  #                         machine ran meanwhile, and the largest of 7,000 peers' timings would be that)
            return fn(*args)
        finally:
            self.cpu[peer.subkey] += time.thread_time() - start

    def send(self, peer: Peer, target: Peer, kind: str) -> None:
        """A push of our announcement, or a pull of a sample of target's view (silent and gone peers missed)."""
        now = self.now()
        self.bytes_out[peer.subkey] += REQUEST_BYTES + (self.entry_bytes if kind == "push" else 0)
        answer_bytes = REQUEST_BYTES + ms.SAMPLE_SIZE * self.entry_bytes
        if not self.delivered(target, answer_bytes if kind == "pull" else REQUEST_BYTES):
            self.silent_asks += target.kind == "silent"
            if target.subkey in peer.neighbours:
                peer.missed.add(target.subkey)
            self.timed(peer, peer.membership.missed, target.subkey)
            if kind == "pull":
                peer.held.pop(target.subkey, None)  # (the node's Gossip.collect: a view miss drops what we hold)
            return
        if kind == "push":
            self.bytes_in[target.subkey] += REQUEST_BYTES + self.entry_bytes
            if target.membership is not None:
                self.timed(target, target.membership.push, self.entry(peer))
            return
        if target.kind == "sybil":
            answer = self.sybil_sample(ms.SAMPLE_SIZE)
        elif self.args.serve_cap and self.view_serves[target.subkey] >= SERVES_PER_BUNDLE["view"]:
            self.bytes_out[target.subkey] += REQUEST_BYTES  # "busy": no answer, and no miss (the node's
            self.bytes_in[peer.subkey] += REQUEST_BYTES  #     SERVES_PER_BUNDLE)
            self.busy += 1
            return
        else:
            self.view_serves[target.subkey] += 1
            own = self.entry(target) if target.kind != "bootstrap" else None  # (no groups to pull)
            answer = self.timed(target, target.membership.sample, ms.SAMPLE_SIZE, now, own,
                                target.established(now) if target.kind == "honest" and self.args.defences
                                else ())
            self.bytes_out[target.subkey] += answer_bytes
        self.bytes_in[peer.subkey] += answer_bytes
        self.validated[peer.subkey] += len(answer)
        self.timed(peer, peer.membership.pull, answer)

    def feed_bootstrap(self, now: float) -> None:
        """The bootstrap reads BOOTSTRAP_READ random entries of the DHT directory a round (its bytes do not grow
        with N), pings each and keeps those that answer in its view (they leave it when they expire): it answers
        newcomers with a random sample of recently read, answering identities, whatever was pushed to it."""
        boot = self.bootstrap
        directory = self.directory()
        read = self.rng.sample(directory, min(len(directory), BOOTSTRAP_READ))
        self.bytes_in[boot.subkey] += len(read) * self.entry_bytes
        self.validated[boot.subkey] += len(read)
        self.bytes_out[boot.subkey] += len(read) * REQUEST_BYTES
        answering = [e for e in read if self.delivered(e.payload, REQUEST_BYTES)]
        self.timed(boot, boot.membership.seed, answering)

    def choose(self, peer: Peer, now: float) -> list[bytes]:
        """The real selection over the view's members (and the established senders we keep)."""
        senders = peer.senders
        view = peer.membership.members(now)
        for entry in view:
            if entry.payload.kind != "bootstrap":
                senders.learn(entry.subkey, self.announcement(entry), entry.expires, now)
        keep = {e.subkey for e in view} | peer.read
        senders.forget([s for s, st in senders.known.items() if s not in keep and not st.established])
        return senders.choose(now, self.round, PULL_PEERS, set(), EXPLORE)

    def pull_groups(self, peer: Peer, target: Peer, now: float) -> bool:
        """A pull of target's groups: a failure backs it off and evicts it; an answer refreshes its entry (the
        owner's signed announcement rides with its bundle) and its score (Sybils' groups teach nothing)."""
        s = target.subkey
        if not self.delivered(target, REQUEST_BYTES):
            self.silent_asks += target.kind == "silent"
            peer.senders.failed(s, self.round)
            peer.membership.missed(s)
            return False
        fresh = self.entry(target)
        peer.senders.learn(s, self.announcement(fresh), fresh.expires, now)
        peer.held[s] = fresh
        peer.senders.succeeded(s, 0.0 if target.kind == "sybil" else 0.8)
        if target.kind == "honest":
            peer.pulled_from.add(s)
            if peer.first_group is None:
                peer.first_group = self.round - peer.joined + 1
            if peer.full is None and len(peer.pulled_from) >= PULL_PEERS:
                peer.full = self.round - peer.joined + 1
        return True

    def announcement(self, entry: Entry) -> Announcement:
        peer = entry.payload
        return Announcement(peer.subkey.hex(), (), 0, entry.created, self.card, BundleRef(b"", 0, 0),
                            BundleRef(b"", 0, 0))

    def join(self, probe: bool = False) -> Peer:
        """A newcomer (during a round), with 2 DHT nodes drawn as its neighbours (seeds())."""
        nodes = [s for s, p in self.peers.items() if p.kind != "bootstrap" and not p.gone]
        peer = self.add("honest", probe=probe)
        peer.neighbours = self.rng.sample(nodes, min(2, len(nodes)))
        self.give_directory(peer)
        return peer


def run(n: int, args, entry_bytes: int, validate_s: float, seed: int, seeding: str = "neighbours") -> dict:
    sim = Sim(n, args, entry_bytes, validate_s, seed, seeding)
    probes: list[Peer] = []
    wall = time.perf_counter()
    gc.disable()  # (collected between rounds: a collection of this large heap inside a peer's timed code would be
    try:  #         charged to that peer as seconds of CPU)
        for r in range(args.rounds):
            gc.collect()
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
    ap.add_argument("--ttl", type=float, default=120.0, help="announcement lifetime (swarm.record_ttl)")
    ap.add_argument("--latency", type=float, nargs=2, default=(0.02, 0.3), help="one-way, uniform (s)")
    ap.add_argument("--bandwidth", type=float, default=10e6, help="bits/s of a peer's link")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-read-budget", dest="read_budget", action="store_false",
                    help="newcomers read 8 shards a round while their view fills (the node before 2026-12-04)")
    ap.add_argument("--coarse-only", dest="fine_shards", action="store_false",
                    help="newcomers read the 64 shards of level 0 only (protocol version 2, before the levels)")
    ap.add_argument("--no-serve-cap", dest="serve_cap", action="store_false",
                    help="a peer serves its view to every pull (no SERVES_PER_BUNDLE: the node before 2026-12-05)")
    ap.add_argument("--no-rescue", dest="rescue", action="store_false",
                    help="a stranded newcomer (no established sender after its first step) does not ask the "
                         "bootstrap (the node before 2026-12-05)")
    ap.add_argument("--no-refill", dest="refill", action="store_false",
                    help="a view that drains below pull_peers is not refilled from the entries held of "
                         "established senders (the node before 2026-12-05: it re-read the directory)")
    ap.add_argument("--no-directory", dest="directory", action="store_false",
                    help="newcomers do not read the DHT directory (the simulation before 2026-12-04)")
    ap.add_argument("--seeding", nargs="+", choices=("neighbours", "bootstrap"), default=["neighbours"],
                    help="how newcomers seed their view (several: each N run with each, in this run; the plot "
                         "and the ratios use the first)")
    ap.add_argument("--no-defences", dest="defences", action="store_false",
                    help="control: no push limit, no samplers, no vouching, newcomers take pushes and do not "
                         "lean on the bootstrap (what the defences are measured against)")
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
                  f"{r['full_missing']} found fewer than {PULL_PEERS} senders within the run")
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
