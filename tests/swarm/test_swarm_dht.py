"""The hivemind layer for real, on loopback: large signed records, forgery, withdrawal, bad bootstrap."""
import time

import numpy as np
import pytest

from node.config import SwarmConfig
from node.errors import SwarmUnreachable
from node.swarm.dht import SwarmDHT, record_key
from protocol.codec import WireCard, WireCompletion, WireGroup, decode_group, encode_group


@pytest.fixture
def pair():
    a = SwarmDHT(SwarmConfig(name="t"))
    b = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(a.visible_maddrs())))
    yield a, b
    for peer in (b, a):
        peer.shutdown()


def big_group(step, vocab=49152, g=16, t=2048):
    rng = np.random.default_rng(step)
    comps = [WireCompletion(rng.integers(0, vocab, t).tolist(), (-rng.exponential(1, t)).tolist(), "length")
             for _ in range(g)]
    card = WireCard("qwen2", 1, False, "fp", vocab, "transformers", 1.0, 1.0, "0.1.0")
    return WireGroup("arith", "1", "train", step, [1, 2, 3], comps, card, step=step)


def test_large_groups_round_trip_30_times(pair):
    a, b = pair
    for step in range(30):
        data = encode_group(big_group(step))
        assert len(data) > 100_000  # far above the ~16 KiB that kills hivemind's stock DHT process
        assert a.publish("groups", data, ttl=30)
        records = b.fetch("groups")
        assert list(records) == [a.own_subkey]
        got = decode_group(records[a.own_subkey][0], receiver_vocab=49152)
        assert got.step == step and got.completions[3].token_ids == big_group(step).completions[3].token_ids


def test_asynchronous_publish_lands(pair):
    a, b = pair
    future = a.publish_async("groups", b"async record", ttl=30)
    assert future.result(timeout=10)
    assert b.fetch("groups")[a.own_subkey][0] == b"async record"


def test_no_peer_can_overwrite_another_peers_record(pair):
    a, b = pair
    assert a.publish("groups", b"from a", ttl=30)
    forged = b._call(b._node.store(record_key("t", "groups"), b"forged", b.now() + 60, subkey=a.own_subkey),
                     timeout=10)
    assert not forged
    assert b.fetch("groups")[a.own_subkey][0] == b"from a"


def test_records_outside_the_schema_are_refused(pair):
    a, b = pair
    store = b._node.store
    assert not b._call(store("t/v1/other-key", b"x", b.now() + 60, subkey=b.own_subkey), timeout=10)
    assert not b._call(store(record_key("t", "groups"), {"not": "bytes"}, b.now() + 60, subkey=b.own_subkey),
                       timeout=10)
    assert b._call(store(record_key("t", "groups"), b"fine", b.now() + 60, subkey=b.own_subkey), timeout=10)
    assert a.fetch("groups")[b.own_subkey][0] == b"fine"


def test_withdrawal_and_size_budget(pair):
    a, b = pair
    assert a.publish("summaries", b"x" * 100, ttl=30)
    assert a.own_subkey in b.fetch("summaries")
    a.withdraw()
    assert b.fetch("summaries") == {}
    with pytest.raises(ValueError, match="exceeds the limit"):
        a.publish("groups", b"x" * (3 * 1024 * 1024 + 1), ttl=30)


def test_unreachable_bootstrap_is_a_clear_error(pair):
    a, _ = pair
    dead = f"/ip4/127.0.0.1/tcp/9/p2p/{a.peer_id}"  # a real peer id at a port where nobody listens
    start = time.monotonic()
    with pytest.raises(SwarmUnreachable, match="could not join the swarm"):
        SwarmDHT(SwarmConfig(name="t", initial_peers=(dead,), startup_timeout=5))
    assert time.monotonic() - start < 60


def test_identity_file_keeps_the_peer_id(tmp_path):
    path = str(tmp_path / "id" / "peer.key")
    first = SwarmDHT(SwarmConfig(name="t", identity=path))
    ids = (first.peer_id, first.own_subkey)
    first.shutdown()
    second = SwarmDHT(SwarmConfig(name="t", identity=path))
    try:
        assert (second.peer_id, second.own_subkey) == ids
    finally:
        second.shutdown()
