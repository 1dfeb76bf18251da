"""Peer sampling through the exchange (node/swarm/gossip.py) on the in-memory swarm: a sender found through
another peer's view, forged entries refused, a peer that does not answer leaves the view, and the DHT read
slowly once the view is full."""
import dataclasses

import msgpack

from node.swarm.memory import MemorySwarm
from protocol.codec import decode_announcement, encode_announcement
from protocol.view import SignedAnnouncement, pack_view, unpack_view
from tests.fixtures import counted_reads, gather, peer, publish_bundles


def only_reads(p, names: set[str]):
    """Makes peer p's DHT reads return only the announcements of `names` (it reads nothing else there)."""
    fetch = p.exchange.transport.fetch_shards_async

    def restricted(shards):
        records = fetch(shards).result()
        kept = {k: v for k, v in records.items() if k.decode() in names}
        records.clear()
        records.update(kept)
        return _done(records)

    p.exchange.transport.fetch_shards_async = restricted


def _done(value):
    from concurrent.futures import Future

    future = Future()
    future.set_result(value)
    return future


def test_a_sender_never_read_in_the_dht_is_found_and_pulled_through_a_view():
    hub = MemorySwarm()
    a, b, c = peer(hub, "a"), peer(hub, "b", model="tiny-sub"), peer(hub, "c")
    only_reads(c, {"b"})  # c sees only b in the directory
    a.step(0)
    b.step(0)  # b reads a in the DHT,
    b.step(1)  # pulls a's view (a's own signed announcement first),
    assert b"a" in {e.subkey for e in b.exchange.gossip.membership.members(hub.clock())}
    b.step(2)  # and serves a sample of its view, a in it
    served = unpack_view(hub.served["b"].latest("view")[1])
    assert served[0].subkey == b"b" and b"a" in {e.subkey for e in served}
    a.step(1)
    gather(c, 16, 64)  # c learns b from the DHT, pulls b's view at its next step
    assert b"a" not in c.exchange.ledger.known
    result = gather(c, 16, 64)
    assert b"a" in c.exchange.ledger.known, "a was learned through b's view"
    assert result.taken.get(b"a", 0) > 0, result  # and its groups pulled and used in the same step
    assert c.exchange.gossip.pulled == 1  # one view pull (b's) was all it took


def test_a_forged_view_entry_is_refused_and_a_real_one_passed_on_is_taken():
    hub = MemorySwarm()
    a, c = peer(hub, "a"), peer(hub, "c")
    a.step(0)
    real = unpack_view(hub.served["a"].latest("view")[1])[0]  # a's own entry, signed by a
    forged_value = encode_announcement(dataclasses.replace(decode_announcement(real.value), peer_id="m",
                                                           maddrs=("/memory/m",)))
    forged = SignedAnnouncement(real.subkey, forged_value, real.signature)  # a's name, m's address
    publish_bundles(hub, "m", groups=msgpack.packb([]))
    hub.transport("m").serve("view", pack_view([forged]))
    only_reads(c, {"m"})
    gather(c, 8, 64)
    result = gather(c, 8, 64)  # c pulls m's view: the forged entry
    assert result.rejected["signature"] == 1, result.rejected
    assert b"a" not in c.exchange.ledger.known
    hub.transport("m").serve("view", pack_view([real]))  # a's own entry, passed on unaltered: taken
    c.step(1)
    c.step(2)
    assert c.exchange.ledger.known[b"a"].announcement.peer_id == "a"
    assert c.exchange.directory.read_before(real.value)


def test_a_peer_whose_view_pull_fails_leaves_the_view_and_stays_a_sender_until_it_fails_pulls():
    hub = MemorySwarm()
    a, b = peer(hub, "a"), peer(hub, "b", model="tiny-sub")
    a.step(0)
    b.step(0)
    b.step(1)
    assert b"a" in b.exchange.gossip.membership.view
    del hub.served["a"]._by_kind["view"]  # a stops serving views (an older peer, or one that never answers)
    b.step(2)
    b.step(3)
    assert b"a" not in b.exchange.gossip.membership.view
    assert b.exchange.gossip.missed >= 1
    assert b"a" in b.exchange.ledger.known  # its groups are still pulled: a view miss says nothing of them


def steps_among(p, others, steps: int, first: int = 0) -> None:
    for step in range(first, first + steps):
        p.step(step)
        for other in others:
            other.step(step + 1)


def test_with_a_full_view_the_directory_is_read_slowly():
    hub = MemorySwarm()
    reader = peer(hub, "r", shards_per_step=8, gossip_shards=2, pull_peers=2)
    others = [peer(hub, f"p{i}", model="tiny-sub") for i in range(3)]
    for p in others:
        p.step(0)
    reads = counted_reads(reader)
    steps_among(reader, others, 4)
    assert reader.exchange.gossip.size() >= 2 and reader.step(4).swarm.view >= 2
    assert reads[0] == 64 and reads[-2] == 2, reads  # whole while alone; the view full, 2 shards a step
    quiet = peer(hub, "q", pull_peers=2)  # the default, swarm.gossip_shards = 0: no reads once the view is full
    reads = counted_reads(quiet)
    steps_among(quiet, others, 6, first=5)
    assert quiet.exchange.gossip.size() >= 2 and reads[0] == 64 and 0 < len(reads) < 6, reads
    before = len(reads)
    assert quiet.step(11).swarm.groups_used > 0 and len(reads) == before  # no read this step, groups all the same


def test_gossip_off_is_the_directory_alone():
    hub = MemorySwarm()
    a, b = peer(hub, "a", gossip=False), peer(hub, "b", model="tiny-sub")
    a.step(0)
    b.step(0)
    a.step(1)
    assert a.exchange.gossip is None and hub.served["a"].latest("view") is None
    assert b"b" in a.exchange.ledger.known


def test_a_newcomers_push_makes_a_peer_that_never_read_it_learn_it_at_its_next_step():
    hub = MemorySwarm()
    a, b = peer(hub, "a"), peer(hub, "b", model="tiny-sub")
    only_reads(a, {"b"})  # a never sees the newcomer in the directory
    b.step(0)
    a.step(0)
    n = peer(hub, "n", model="tiny-sub")
    n.step(0)  # reads the DHT (a and b), and at its next step pushes to them: a newcomer (no sender
    n.step(1)  # established) pushes to up to NEWCOMER_PUSH_FANOUT = 3 a step
    assert {name for name in ("a", "b") if "n" in hub.hellos[name]} == {"a", "b"}
    assert b"n" not in a.exchange.ledger.known
    gather(a, 16, 64)
    assert b"n" in a.exchange.ledger.known and a.exchange.gossip.heard == 1


def test_a_step_with_pushes_from_more_peers_than_the_limit_takes_none():
    hub = MemorySwarm()
    a = peer(hub, "a")
    pushers = [peer(hub, f"s{i}", model="tiny-sub") for i in range(4)]  # PUSH_LIMIT is 3
    only_reads(a, set())
    a.step(0)
    for p in pushers:
        only_reads(p, set())  # (they push to a only, below)
        p.step(0)
        hub.transport(p.exchange.transport.peer_id).hello_async("a")
    assert len(hub.hellos["a"]) == 4
    a.step(1)
    assert a.exchange.gossip.flooded == 1 and a.exchange.gossip.heard == 0
    assert not a.exchange.ledger.known
    for p in pushers[:3]:  # at the limit, all are taken
        hub.transport(p.exchange.transport.peer_id).hello_async("a")
    a.step(2)
    assert a.exchange.gossip.heard == 3 and len(a.exchange.ledger.known) == 3


def test_a_push_whose_view_names_another_peer_first_is_not_taken():
    """A pusher serving someone else's (validly signed) entry first: the entry is not the pusher's own."""
    hub = MemorySwarm()
    a, v = peer(hub, "a"), peer(hub, "v", model="tiny-sub")
    only_reads(a, set())
    only_reads(v, set())
    a.step(0)
    v.step(0)
    victim_entry = unpack_view(hub.served["v"].latest("view")[1])[0]
    publish_bundles(hub, "m", groups=msgpack.packb([]))
    hub.transport("m").serve("view", pack_view([victim_entry]))
    hub.transport("m").hello_async("a")
    assert list(hub.hellos["a"]) == ["m"]
    a.step(1)
    assert a.exchange.gossip.heard == 0 and b"m" not in a.exchange.ledger.known  # (v's genuine entry may be
    hub.transport("v").hello_async("a")  # v's own push: taken                     learned, as from any view)
    a.step(2)
    assert a.exchange.gossip.heard == 1 and b"v" in a.exchange.ledger.known


def test_with_a_full_view_a_hung_directory_read_costs_the_step_nothing():
    """Silent DHT nodes make a read wait: once the view finds the senders, a step does not wait for the read
    (taken when it lands); with gossip off, the same hung read holds each step to its deadline."""
    import time
    from concurrent.futures import Future

    for gossip, least, most in ((True, 0.0, 1.0), (False, 2.0, 10.0)):
        hub = MemorySwarm()
        reader = peer(hub, "r", pull_peers=2, gather_deadline=2.0, gossip=gossip, gossip_shards=2)
        others = [peer(hub, f"p{i}", model="tiny-sub") for i in range(3)]
        for step in range(3):
            for p in others:
                p.step(step)
            reader.step(step)
        reader.exchange.transport.fetch_shards_async = lambda shards: Future()  # never finishes
        for p in others:
            p.step(3)
        gather(reader, 16, 64)  # (the hung read starts)
        for p in others:
            p.step(4)  # fresh groups, whichever senders this step pulls
        started = time.monotonic()
        result = gather(reader, 16, 64)
        took = time.monotonic() - started
        assert least <= took < most, (gossip, took)
        assert result.late_fetches == 1
        if gossip:
            assert result.groups, "the senders the view found were pulled meanwhile"


def test_a_newcomer_the_directory_refuses_is_still_found_and_pulled():
    """Shard squatting: grinding identities into a newcomer's shard fills it, and the DHT refuses the
    newcomer's announcement. Its push still makes a peer learn it and pull its groups."""
    hub = MemorySwarm()
    a = peer(hub, "a", model="tiny-sub")
    a.step(0)
    n = peer(hub, "n")
    n.exchange.transport.announce_async = lambda value, ttl, **shards: _done(False)  # the shard is full: refused
    n.step(0)
    assert all(b"n" not in records for records in hub.announcements.values())
    n.step(1)  # it read a in the directory, and pushes to it
    assert list(hub.hellos["a"]) == ["n"]
    taken = a.step(1).swarm.pushes  # a takes the push: learns n from n's own signed entry
    assert b"n" in a.exchange.ledger.known and taken == 1  # (and its step's metrics say so)
    n.step(2)
    result = gather(a, 16, 64)
    assert result.taken.get(b"n", 0) > 0, result


def test_a_view_pulled_more_often_than_its_budget_answers_busy_and_the_puller_keeps_it():
    """A view bundle is served to SERVES_PER_BUNDLE peers (the peers most vouched for are not asked by ever more
    peers as the swarm grows; one served already is served again); beyond, pulls of it are answered "busy",
    which is no miss: the puller keeps the peer in its view. A new view (the next step) is served again."""
    from node.swarm import SERVES_PER_BUNDLE
    from protocol.codec import RecordError

    hub = MemorySwarm()
    a, b = peer(hub, "a"), peer(hub, "b", model="tiny-sub")
    a.step(0)
    b.step(0)
    b.step(1)
    assert b"a" in b.exchange.gossip.membership.view
    a.step(1)  # a new view of a's, which b has not pulled
    limit = SERVES_PER_BUNDLE["view"]
    for _ in range(limit + 1):  # one peer, again and again: served, and counted once
        assert hub.transport("x0").pull_async("a", "view", b"", 1 << 20, 5.0).exception() is None
    answers = [hub.transport(f"x{i}").pull_async("a", "view", b"", 1 << 20, 5.0) for i in range(1, limit + 1)]
    assert all(f.exception() is None for f in answers[:-1])  # 8 peers served
    err = answers[-1].exception()  # the 9th
    assert isinstance(err, RecordError) and err.reason == "busy", err
    missed = b.exchange.gossip.missed
    b.step(2)
    b.step(3)
    assert b"a" in b.exchange.gossip.membership.view and b.exchange.gossip.missed == missed  # busy: no miss
    assert b.exchange.gossip.busy >= 1
    a.step(2)  # a new view: served again
    assert hub.transport(f"x{limit}").pull_async("a", "view", b"", 1 << 20, 5.0).exception() is None


def test_a_drained_view_refills_from_established_senders_without_a_directory_read():
    """A view whose entries all expire or go silent at once (in a large swarm, now and then) takes the entries
    held of the senders that proved themselves here: no directory read and no signature check; without them
    (nothing held) the same drained view reads the directory."""
    hub = MemorySwarm()
    others = [peer(hub, f"p{i}", model="tiny-sub") for i in range(3)]
    for p in others:
        p.step(0)
    q = peer(hub, "q", pull_peers=2)
    steps_among(q, others, 6)
    gossip = q.exchange.gossip
    vouched = q.exchange.ledger.vouched(hub.clock())
    assert len(vouched) >= 2 and {s for s in vouched if s in gossip.held} == set(vouched), (vouched, gossip.held)
    reads, checks = counted_reads(q), []
    verify = q.exchange.transport.verify
    # (an announcement's signature; receipts naming q are checked apart)
    q.exchange.transport.verify = lambda *a: (a[0] != "receipt" and checks.append(a), verify(*a))[1]
    gossip.membership.view.clear()  # drained
    q.exchange.prefetch()
    assert reads == [] and not checks, (reads, len(checks))
    assert gossip.size() >= 2 and set(gossip.membership.view) <= set(vouched)
    q.exchange.gather(16, 64)
    silent = vouched[0].decode()
    del hub.served[silent]._by_kind["view"]  # one of them stops answering view pulls: a miss
    for _ in range(4):
        q.exchange.prefetch()
        q.exchange.gather(16, 64)
        if gossip.missed:
            break
    assert gossip.missed >= 1 and vouched[0] not in gossip.held
    gossip.membership.view.clear()
    q.exchange.prefetch()
    assert gossip.size() >= 1 and vouched[0] not in gossip.membership.view  # the others are; not it, until it
    #                                                                         answers again
    q.exchange.gather(16, 64)
    gossip.membership.view.clear()  # drained again, and nothing held: the directory serves
    gossip.held.clear()
    q.exchange.prefetch()
    assert reads and reads[0] > 0, reads


def test_an_announcement_gone_stale_or_refused_before_comes_again_through_a_view_and_the_peer_goes_on():
    """Found in a long mixed swarm (peers at step 400+): a view entry whose announcement the directory had read
    before and now finds stale (or had refused) came back from check() as None, and the identity check read its
    peer id: AttributeError, the peer died. Now such an entry is passed over, every time it comes."""
    now = [1000.0]
    hub = MemorySwarm(clock=lambda: now[0])
    a, c = peer(hub, "a"), peer(hub, "c")
    a.step(0)
    real = unpack_view(hub.served["a"].latest("view")[1])[0]  # a's own signed entry, stamped now
    publish_bundles(hub, "m", groups=msgpack.packb([]))
    hub.transport("m").serve("view", pack_view([real]))
    only_reads(c, {"m"})
    gather(c, 8, 64)
    gather(c, 8, 64)  # c pulls m's view: a's entry, fresh, taken
    assert c.exchange.directory.read_before(real.value)
    now[0] += 10 * c.cfg.swarm.max_age  # a's entry is now long stale; m announces afresh, its view still carries it
    publish_bundles(hub, "m", groups=msgpack.packb([]))
    hub.transport("m").serve("view", pack_view([real]))
    pulled = c.exchange.gossip.pulled
    for _ in range(4):
        result = gather(c, 8, 64)
        assert "identity" not in result.rejected
    assert c.exchange.gossip.pulled > pulled  # m's view was pulled again, a's stale entry in it, and passed over
    assert b"a" not in c.exchange.ledger.known
