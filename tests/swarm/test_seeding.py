"""The bootstrap's view (node/swarm/seeding.py) on the in-memory swarm: it fills from a rotation of the
directory and view pulls, never reads the whole directory, serves only entries their owners signed, and a
newcomer that pulls it first trains on received groups in its first step without a whole-directory read."""
import random

from node.config import SwarmConfig
from node.swarm.directory import FANOUT
from node.swarm.memory import MemorySwarm
from node.swarm.seeding import SeedView
from protocol import ANNOUNCE_SHARDS
from protocol.codec import bundle_digest
from protocol.view import SignedAnnouncement, pack_view, unpack_view
from tests.fixtures import counted_reads, peer


def bootstrap(hub, **cfg) -> SeedView:
    return SeedView(hub.transport("boot"), SwarmConfig(**cfg), random.Random(0))


def swarm_of(hub, n: int, steps: int = 2) -> list:
    peers = [peer(hub, f"p{i}", model="tiny-sub" if i % 2 else "tiny-add") for i in range(n)]
    for step in range(steps):
        for p in peers:
            p.step(step)
    return peers


def seeded_swarm(hub):
    """Four peers and a bootstrap whose view holds them."""
    swarm_of(hub, 4)
    seeds = bootstrap(hub)
    for _ in range(20):  # (first reads of fine shards, then the coarse rotation)
        seeds.round()
    assert seeds.size() == 4


def newcomer_of(hub, name: str = "new", neighbours=(), **swarm):
    """A newcomer whose initial peer is the bootstrap, with these DHT neighbours (peer ids) as its first seeds."""
    p = peer(hub, name, **{"shards_per_step": 8, **swarm})
    p.exchange.transport.neighbours = [(n, ()) for n in neighbours]
    p.exchange.transport.initial = [("boot", ())]
    return p


def test_the_bootstrap_view_fills_from_a_rotation_and_serves_signed_entries():
    hub = MemorySwarm()
    peers = swarm_of(hub, 6)
    seeds = bootstrap(hub)
    reads = []
    fetch = seeds.transport.fetch_shards_async
    seeds.transport.fetch_shards_async = lambda shards: (reads.append(len(shards)), fetch(shards))[1]
    for _ in range(20):  # (its first reads, of fine shards, show the swarm is small: then the coarse rotation)
        seeds.round()
    most = max(SwarmConfig().shards_per_step, 2 * (1 + FANOUT))  # (shards_per_step shards, or two columns)
    assert reads and max(reads) <= most < ANNOUNCE_SHARDS, reads  # never the whole
    assert seeds.size() == len(peers), (seeds.size(), reads)  # all six found within 20 rounds
    served = unpack_view(hub.served["boot"].latest("view")[1])
    assert 0 < len(served) <= 8 and {e.subkey for e in served} <= {p.exchange.transport.own_subkey for p in peers}
    t = hub.transport("x")
    assert all(t.verify("ann", bundle_digest(e.value), e.signature, e.subkey) for e in served)  # as signed
    assert len(seeds.live()) == len(peers)  # the status line's count: every peer read in the rotation


def test_a_newcomer_seeded_by_the_bootstrap_reads_no_whole_directory_and_trains_on_received_groups():
    hub = MemorySwarm()
    seeded_swarm(hub)
    newcomer = newcomer_of(hub)
    reads = counted_reads(newcomer)
    first = newcomer.step(0)
    assert reads == [1], reads  # its first step: one shard of the rotation (READ_BUDGET), not the 64
    assert newcomer.exchange.gossip.seeded >= 4 and first.swarm.groups_used > 0, first.swarm
    for step in range(1, 4):
        newcomer.step(step)
    assert ANNOUNCE_SHARDS not in reads, reads  # and never since


def test_a_newcomer_whose_directory_read_hangs_pulls_the_senders_its_seed_named_in_its_first_step():
    """Silent DHT nodes hold a newcomer's first directory read; its seed's view named fewer senders than it pulls
    from, so the step awaits the read up to its deadline: the senders already named are pulled meanwhile, and
    it trains on their groups in its first step (10 silent DHT servers of 32 in bench/network/gossip.py: the
    first received groups came a step late, twice, before)."""
    import threading
    from concurrent.futures import Future

    hub = MemorySwarm()
    seeded_swarm(hub)
    newcomer = newcomer_of(hub, gather_deadline=2.0)  # (a wide margin over the pulls' 50 ms on a busy machine)
    transport = newcomer.exchange.transport
    transport.fetch_shards_async = lambda shards: Future()  # never finishes
    pull = transport.pull_async

    def over_the_wire(peer_id, kind, *args, **kwargs):  # a bundle pull takes 50 ms, as on a network (in memory
        answer, landed = pull(peer_id, kind, *args, **kwargs), Future()  # it is done at once; views still are)
        if kind == "view":
            return answer
        threading.Timer(0.05, lambda: landed.set_result(answer.result()) if answer.exception() is None
                        else landed.set_exception(answer.exception())).start()
        return landed

    transport.pull_async = over_the_wire
    first = newcomer.step(0)
    assert 0 < newcomer.exchange.gossip.size() < newcomer.exchange.cfg.pull_peers  # (awaits the read)
    assert first.swarm.late_fetches == 1 and first.swarm.groups_used > 0, first.swarm


def view_pulls(p) -> list[str]:
    """The peers whose views peer p pulls from now on, in order."""
    asked = []
    pull = p.exchange.transport.pull_async
    p.exchange.transport.pull_async = lambda peer_id, kind, *a, **kw: (
        asked.append(peer_id) if kind == "view" else None, pull(peer_id, kind, *a, **kw))[1]
    return asked


def test_a_newcomer_seeds_from_its_dht_neighbours_and_asks_the_bootstrap_only_when_they_miss():
    hub = MemorySwarm()
    seeded_swarm(hub)
    newcomer = newcomer_of(hub, neighbours=("p1", "p2"))
    asked = view_pulls(newcomer)
    first = newcomer.step(0)
    assert asked[:2] == ["p1", "p2"] and "boot" not in asked, asked  # the bootstrap is not asked
    assert newcomer.exchange.gossip.seeded >= 2 and first.swarm.groups_used > 0, first.swarm
    # neighbours that are gone (or silent): the next step asks the bootstrap, not SEED_RETRY steps later
    late = newcomer_of(hub, "late", neighbours=("gone1", "gone2"))
    asked = view_pulls(late)
    late.step(0)
    assert asked == ["gone1", "gone2"] and late.exchange.gossip.seeds_missed == {"gone1", "gone2"}, asked
    late.step(1)
    assert "boot" in asked[2:] and late.exchange.gossip.seeded >= 4, (asked, late.exchange.gossip.seeded)


def test_without_a_bootstrap_view_the_newcomer_falls_back_to_the_whole_directory():
    hub = MemorySwarm()
    swarm_of(hub, 2)
    hub.transport("boot").serve("view", pack_view([]))  # a bootstrap whose view is empty (or an older one)
    newcomer = newcomer_of(hub)
    fetch = newcomer.exchange.transport.fetch_shards_async
    newcomer.exchange.transport.fetch_shards_async = lambda shards: fetch(
        shards if len(shards) == ANNOUNCE_SHARDS else [])  # its rotation's shards happen to be empty
    reads = counted_reads(newcomer)
    newcomer.step(0)
    newcomer.step(1)
    assert reads[:2] == [1, ANNOUNCE_SHARDS], reads  # the seed answered nothing: the next step reads it all
    assert newcomer.exchange.gossip.seed_failed and newcomer.exchange.ledger.known


def test_a_forged_entry_in_a_bootstrap_view_is_refused():
    hub = MemorySwarm()
    peers = swarm_of(hub, 2)
    real = unpack_view(hub.served["p0"].latest("view")[1])[0]
    other = unpack_view(hub.served["p1"].latest("view")[1])[0]
    forged = SignedAnnouncement(real.subkey, other.value, real.signature)  # p0's name on p1's announcement
    hub.transport("boot").serve("view", pack_view([forged, other]))
    newcomer = newcomer_of(hub)
    result = newcomer.step(0)
    assert result.swarm.rejected.get("signature") == 1, result.swarm.rejected
    members = {e.subkey for e in newcomer.exchange.gossip.membership.members(hub.clock())}
    assert other.subkey in members and peers[0].exchange.transport.own_subkey not in members


def test_the_bootstrap_evicts_a_peer_that_stops_answering():
    hub = MemorySwarm()
    peers = swarm_of(hub, 3)
    seeds = bootstrap(hub)
    for _ in range(20):
        seeds.round()
    gone = peers[0].exchange.transport.own_subkey
    assert gone in {e.subkey for e in seeds.gossip.membership.members(hub.clock())}
    del hub.served["p0"]  # p0 stops answering (its announcement still in the directory)
    for _ in range(12):
        seeds.round()
        assert gone not in seeds.serve() or seeds.gossip.missed == 0
    assert gone not in {e.subkey for e in seeds.gossip.membership.members(hub.clock())}
    assert seeds.gossip.missed >= 1


def test_the_bootstrap_reads_at_most_its_budget_of_entries_and_estimates_the_swarm(monkeypatch):
    import node.swarm.directory as directory

    hub = MemorySwarm()
    peers = swarm_of(hub, 6, steps=1)
    monkeypatch.setattr(directory, "READ_BUDGET", 1)  # rests as if each shard held many announcements
    seeds = bootstrap(hub, shards_per_step=ANNOUNCE_SHARDS // 2)  # half the directory a read
    seeds.directory.plan, seeds.directory.mass = (0, False), 1.0  # as after a first read: level 0, empty
    reads = []
    fetch = seeds.transport.fetch_shards_async
    seeds.transport.fetch_shards_async = lambda shards: (reads.append(shards), fetch(shards))[1]
    seeds.round()  # starts the first read (half the shards)
    seeds.round()  # takes it: some of the 6 entries
    first = len(fetch(reads[0]).result())
    assert len(reads) == 1 and 1 <= first < len(peers), (reads, first)
    assert seeds.estimate() == first * 2  # half the shards read: their count scaled to all 64
    for _ in range(first - 1):
        seeds.round()
    assert len(reads) == 1, reads  # first // READ_BUDGET rounds without a read,
    seeds.round()
    assert len(reads) == 2, reads  # then the next
    seeds.round()
    assert seeds.estimate() == len(peers) == len(seeds.live())  # every shard read within the TTL: exact


def sybil_seed(hub, name: str, sybils: list[str]) -> None:
    """A neighbour that hands out only identities whose groups teach nothing (each serves an empty groups bundle
    and announces it, its own signed entry in the view)."""
    from test_exchange import publish_bundles

    from protocol.codec import bundle_statement

    entries = []
    for sybil in sybils:
        publish_bundles(hub, sybil)  # (empty groups bundle)
        value = next(v for shard in hub.announcements.values() for k, (v, _) in shard.items() if k == sybil.encode())
        entries.append(SignedAnnouncement(sybil.encode(), value,
                                          hub.sign(sybil.encode(), bundle_statement("ann", bundle_digest(value)))))
    hub.transport(name).serve("view", pack_view(entries))


def test_a_stranded_newcomer_asks_the_seeds_it_has_not_asked():
    """Both neighbours hand the newcomer only Sybils (valid entries, groups that teach nothing): its view fills,
    but no sender helps it at its first step, so at its second it asks its initial peer (the bootstrap), once,
    starts that step's pulls only once the bootstrap's view is taken, and trains on received groups (issue 25:
    within 2 steps); a newcomer that honest neighbours helped does not ask it."""
    hub = MemorySwarm()
    seeded_swarm(hub)
    sybils = [f"s{i}" for i in range(8)]
    for name in ("n1", "n2"):
        sybil_seed(hub, name, sybils)
    newcomer = newcomer_of(hub, neighbours=("n1", "n2"))
    only = newcomer.exchange.transport.fetch_shards_async  # (its directory reads find nothing: the seeds only)
    newcomer.exchange.transport.fetch_shards_async = lambda shards: only([])
    asked = view_pulls(newcomer)
    first = newcomer.step(0)
    assert asked[:2] == ["n1", "n2"] and "boot" not in asked and first.swarm.groups_used == 0, (asked, first.swarm)
    second = newcomer.step(1)
    assert asked.count("boot") == 1 and second.swarm.groups_used > 0, (asked, second.swarm)
    newcomer.step(2)
    assert asked.count("boot") == 1, asked  # once
    fresh = MemorySwarm()  # (its own swarm: groups published just before, as in the stranded newcomer's swarm,
    seeded_swarm(fresh)  # not ones that aged while the newcomer above took its steps on a loaded machine)
    helped = newcomer_of(fresh, "helped", neighbours=("p1", "p2"))
    asked = view_pulls(helped)
    for step in range(3):
        helped.step(step)
    assert "boot" not in asked, asked
