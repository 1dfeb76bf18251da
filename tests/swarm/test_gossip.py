"""Peer sampling through the exchange (node/swarm/gossip.py) on the in-memory swarm: a sender found through
another peer's view, forged entries refused, a peer that does not answer leaves the view, and the DHT read
slowly once the view is full."""
import dataclasses

import msgpack
from test_exchange import gather, peer, publish_bundles

from node.swarm.memory import MemorySwarm
from protocol.codec import bundle_digest, decode_announcement, encode_announcement
from protocol.view import SignedAnnouncement, pack_view, unpack_view


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
    assert b"a" not in c.exchange.senders.known
    result = gather(c, 16, 64)
    assert b"a" in c.exchange.senders.known, "a was learned through b's view"
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
    assert b"a" not in c.exchange.senders.known
    hub.transport("m").serve("view", pack_view([real]))  # a's own entry, passed on unaltered: taken
    c.step(1)
    c.step(2)
    assert c.exchange.senders.known[b"a"].announcement.peer_id == "a"
    assert bundle_digest(real.value) in c.exchange.announcements


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
    assert b"a" in b.exchange.senders.known  # its groups are still pulled: a view miss says nothing of them


def test_with_a_full_view_the_directory_is_read_slowly():
    hub = MemorySwarm()
    reader = peer(hub, "r", shards_per_step=8, gossip_shards=2, pull_peers=2)
    others = [peer(hub, f"p{i}", model="tiny-sub") for i in range(3)]
    for p in others:
        p.step(0)
    reads = []
    fetch = reader.exchange.transport.fetch_shards_async
    reader.exchange.transport.fetch_shards_async = lambda shards: (reads.append(len(shards)), fetch(shards))[1]
    for step in range(4):
        reader.step(step)
        for p in others:
            p.step(step + 1)
    assert reader.exchange.gossip.size() >= 2
    assert reads[0] == 64 and reads[-1] == 2, reads  # whole while alone; the view full, 2 shards a step


def test_gossip_off_is_the_directory_alone():
    hub = MemorySwarm()
    a, b = peer(hub, "a", gossip=False), peer(hub, "b", model="tiny-sub")
    a.step(0)
    b.step(0)
    a.step(1)
    assert a.exchange.gossip is None and hub.served["a"].latest("view") is None
    assert b"b" in a.exchange.senders.known
