"""The hivemind layer for real, on loopback: large signed records, forgery, withdrawal, bad bootstrap."""
import time

import numpy as np
import pytest

from bench.attacks.hostile import HostileDHT
from node.config import SwarmConfig
from node.errors import SwarmUnreachable
from node.swarm.dht import SwarmDHT, announcement_kind, record_key, signature_check
from protocol import ANNOUNCE_SHARDS, MAX_ANNOUNCEMENT, PROTOCOL_VERSION, SHARD_LEVELS
from protocol.codec import (
    Announcement,
    BundleAssembler,
    BundleRef,
    RecordError,
    WireCard,
    WireCompletion,
    WireGroup,
    announcement_shards,
    bundle_chunks,
    bundle_digest,
    bundle_statement,
    decode_announcement,
    decode_group,
    encode_announcement,
    encode_group,
    pack_bundle,
    shard_id,
    shard_level,
    shard_within,
    unpack_bundle,
)


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


def test_large_groups_cross_peer_to_peer_30_times(pair):
    a, b = pair
    thread_before, daemon_before = b.cpu_seconds()
    for step in range(30):
        data = encode_group(big_group(step))
        assert len(data) > 100_000  # far above the ~16 KiB that kills hivemind's stock DHT process
        a.serve("groups", pack_bundle([data], 8 << 20)[0])
        bundle = b.pull_async(a.peer_id, "groups", b"", 8 << 20, timeout=30, maddrs=tuple(a.visible_maddrs()))
        got = decode_group(unpack_bundle(bundle.result(40), 8 << 20)[0], receiver_vocab=49152)
        assert got.step == step and got.completions[3].token_ids == big_group(step).completions[3].token_ids
    thread_after, daemon_after = b.cpu_seconds()  # the puller's DHT thread and its p2pd both worked for it
    assert thread_after > thread_before > 0 and daemon_after > daemon_before > 0, (b.cpu_seconds(), thread_before)


def test_asynchronous_announcement_lands(pair):
    a, b = pair
    assert a.announce_async(b"async record", ttl=30).result(timeout=10)
    assert b.fetch_shards_async([a.shard]).result(10)[a.own_subkey][0] == b"async record"


def test_no_peer_can_overwrite_another_peers_record(pair):
    a, b = pair
    assert a.announce_async(b"from a", ttl=30).result(10)
    forged = b._call(b._node.store(record_key("t", announcement_kind(a.shard)), b"forged", b.now() + 60,
                                   subkey=a.own_subkey), timeout=10)
    assert not forged
    assert b.fetch_shards_async([a.shard]).result(10)[a.own_subkey][0] == b"from a"


def test_records_outside_the_schema_are_refused(pair):
    a, b = pair
    store, own, v = b._node.store, record_key("t", announcement_kind(b.shard)), PROTOCOL_VERSION
    assert not b._call(store(f"t/v{v}/other-key", b"x", b.now() + 60, subkey=b.own_subkey), timeout=10)
    assert not b._call(store(f"t/v{v}/groups", b"x", b.now() + 60, subkey=b.own_subkey), timeout=10)  # retired
    assert not b._call(store(own, {"not": "bytes"}, b.now() + 60, subkey=b.own_subkey), timeout=10)
    assert b._call(store(own, b"fine", b.now() + 60, subkey=b.own_subkey), timeout=10)
    assert a.fetch_shards_async([b.shard]).result(10)[b.own_subkey][0] == b"fine"


def test_withdrawal_and_size_budget(pair):
    a, b = pair
    assert a.announce_async(b"x" * 100, ttl=30).result(10)
    assert a.own_subkey in b.fetch_shards_async([a.shard]).result(10)
    a.withdraw()
    read = b.fetch_shards_async([a.shard]).result(10)
    assert read == {} and read.withdrawn == {a.own_subkey}  # the tombstone: the evidence a reader forgets on
    with pytest.raises(ValueError, match="exceeds the limit"):
        a.announce_async(b"x" * (MAX_ANNOUNCEMENT + 1), ttl=30)


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


def test_bundles_are_pulled_peer_to_peer_in_chunks_and_checked_against_their_digest(pair):
    """A 5 MiB bundle (above hivemind's 4 MiB message limit) crosses whole, in chunks; what was not asked for
    (another digest), more than the receiver takes, and a bundle no longer served are refused by reason."""
    a, b = pair
    bundle = np.random.default_rng(0).bytes(5 * 1024 * 1024 + 7)
    digest = a.serve("groups", bundle)
    assert digest == bundle_digest(bundle)
    assert b.pull_async(a.peer_id, "groups", digest, max_bytes=8 << 20, timeout=60).result(70) == bundle
    refused = {
        "missing": (a.peer_id, "groups", bundle_digest(b"another bundle"), 8 << 20),
        "oversize": (a.peer_id, "groups", digest, 1 << 20),
    }
    for reason, args in refused.items():
        with pytest.raises(RecordError) as err:
            b.pull_async(*args, timeout=60).result(70)
        assert err.value.reason == reason
    for i in range(2):  # the latest two bundles of a kind stay served; older ones are gone
        a.serve("groups", bytes([i]) * 100)
    with pytest.raises(RecordError, match="does not serve"):
        b.pull_async(a.peer_id, "groups", digest, max_bytes=8 << 20, timeout=60).result(70)
    assert b.pull_async(a.peer_id, "groups", bundle_digest(bytes([0]) * 100), 1000, timeout=60).result(70) == \
        bytes([0]) * 100
    assert b.pull_async(a.peer_id, "groups", b"", 1000, timeout=60).result(70) == bytes([1]) * 100  # the latest


def test_a_bundle_stream_that_breaks_its_own_rules_is_refused():
    digest = bundle_digest(b"x" * 10)
    whole = bundle_chunks(b"x" * 10, chunk=4)
    assert [len(c.data) for c in whole] == [4, 4, 2] and {c.total for c in whole} == {10}
    good = BundleAssembler(digest, max_bytes=10)
    assert [good.add(c) for c in whole] == [False, False, True] and good.bundle() == b"x" * 10
    changing = BundleAssembler(digest, 100)
    changing.add(whole[0])
    with pytest.raises(RecordError, match="disagree"):
        changing.add(bundle_chunks(b"x" * 12, chunk=4)[1])
    with pytest.raises(RecordError) as err:  # another bundle, named as such
        BundleAssembler(digest, 100).add(bundle_chunks(b"y" * 10, chunk=4)[0])
    assert err.value.reason == "digest"
    lying = BundleAssembler(digest, 100)  # other bytes under the digest asked for
    for c in bundle_chunks(b"y" * 10, chunk=4):
        c.digest = digest
        lying.add(c)
    with pytest.raises(RecordError) as err:
        lying.bundle()
    assert err.value.reason == "digest"
    latest = BundleAssembler(b"", 100)  # asking for the latest: the digest the sender names is checked
    assert [latest.add(c) for c in bundle_chunks(b"z" * 5)] == [True] and latest.bundle() == b"z" * 5
    short = BundleAssembler(digest, 100)
    short.add(whole[0])
    with pytest.raises(RecordError, match="ended after 4 of 10"):
        short.bundle()


def test_only_the_owner_can_sign_a_bundle_so_no_relay_can_alter_or_relabel_it():
    """What a relay (or cache) of a pulled bundle could try: send other bytes under their own digest with the
    owner's signature of the real one, relabel a groups bundle as summaries, drop the signature, or sign
    itself. The owner's public key (its DHT subkey) refuses each."""
    from hivemind.dht.crypto import RSASignatureValidator
    from hivemind.utils.crypto import RSAPrivateKey

    owner, relay = RSAPrivateKey(), RSAPrivateKey()
    subkey = RSASignatureValidator(owner).local_public_key
    bundle, forged = b"honest groups" * 100, b"forged groups" * 100
    signature = owner.sign(bundle_statement("groups", bundle_digest(bundle)))

    def pull(chunks, kind="groups"):
        assembler = BundleAssembler(b"", 1 << 20, signature_check(kind, subkey))
        for chunk in chunks:
            if assembler.add(chunk):
                break
        return assembler.bundle()

    assert pull(bundle_chunks(bundle, signature, chunk=512)) == bundle
    for chunks, kind in ((bundle_chunks(forged, signature), "groups"),  # other bytes, the owner's signature
                         (bundle_chunks(bundle, signature), "summaries"),  # relabelled
                         (bundle_chunks(bundle), "groups"),  # unsigned
                         (bundle_chunks(forged, relay.sign(bundle_statement("groups", bundle_digest(forged)))),
                          "groups")):  # signed by the relay
        with pytest.raises(RecordError) as err:
            pull(chunks, kind)
        assert err.value.reason == "signature"
    assert not signature_check("groups", b"[owner:not a key]")(bundle_digest(bundle), signature)


def test_announcements_name_at_most_two_relays():
    card = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0.1.0")
    ref = BundleRef(bundle_digest(b"b"), 10, 1)
    relayed = Announcement("QmNat", (), 3, 1.0, card, ref, ref, relays=("QmRelayA", "QmRelayB"))
    assert decode_announcement(encode_announcement(relayed)).relays == ("QmRelayA", "QmRelayB")
    with pytest.raises(RecordError) as err:
        decode_announcement(encode_announcement(Announcement("QmNat", (), 3, 1.0, card, ref, ref,
                                                             relays=("a", "b", "c"))))
    assert err.value.reason == "announcement"


def announcement(peer: SwarmDHT, step: int = 1) -> bytes:
    ref = BundleRef(bundle_digest(b"bundle %d" % step), 1000, 4)
    card = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0.1.0")
    return encode_announcement(Announcement(peer.peer_id, tuple(peer.visible_maddrs()[:4]), step, peer.now(),
                                            card, ref, ref))


def test_announcements_live_only_in_their_own_shard_and_are_small(pair):
    """Each identity announces in the shards its subkey hashes to, one a level (each within the one above); an
    announcement stored (signed) in another shard of any level, or one above MAX_ANNOUNCEMENT bytes, is refused
    by every honest node."""
    a, b = pair
    assert a.announce_async(announcement(a), ttl=30, levels=range(len(SHARD_LEVELS))).result(30)
    own = announcement_shards(a.own_subkey)
    assert own[0] == a.shard and [shard_level(s)[0] for s in own] == list(range(len(SHARD_LEVELS)))
    assert all(shard_within(own[level], above) == own[above] for level in range(len(own)) for above in range(level))
    for shard in own:
        found = b.fetch_shards_async([shard]).result(30)
        assert list(found) == [a.own_subkey] and decode_announcement(found[a.own_subkey][0]).peer_id == a.peer_id
    others = [i for i in range(ANNOUNCE_SHARDS) if i != a.shard][:3]
    for level in range(1, len(SHARD_LEVELS)):  # the same shard above, another at this level
        number = shard_level(own[level])[1]
        others.append(shard_id(level, (number + SHARD_LEVELS[level - 1]) % SHARD_LEVELS[level]))
    assert b.fetch_shards_async(others).result(30) == {}
    card = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0.1.0")
    mallory = HostileDHT(SwarmConfig(name="t", initial_peers=tuple(a.visible_maddrs())), card=card)
    try:
        wrong = (mallory.shard + 1) % ANNOUNCE_SHARDS
        own_fine = announcement_shards(mallory.own_subkey)[-1]
        level, number = shard_level(own_fine)
        wrong_fine = shard_id(level, (number + SHARD_LEVELS[level - 1]) % SHARD_LEVELS[level])  # same shard above
        for shard in (wrong, wrong_fine):
            mallory.raw_store(announcement_kind(shard), announcement(mallory), mallory.now() + 30, mallory.own_subkey)
        mallory.raw_store(announcement_kind(mallory.shard), b"x" * (MAX_ANNOUNCEMENT + 1), mallory.now() + 30,
                          mallory.own_subkey)
        seen = b.fetch_shards_async([wrong, wrong_fine, mallory.shard]).result(30)
        assert mallory.own_subkey not in seen, seen
        assert mallory.announce_async(announcement(mallory), ttl=30,  # its own shards, small: fine
                                      levels=range(len(SHARD_LEVELS))).result(30)
        assert mallory.own_subkey in b.fetch_shards_async([mallory.shard]).result(30)
        assert mallory.own_subkey in b.fetch_shards_async([own_fine]).result(30)
    finally:
        mallory.shutdown()


def test_no_shard_key_grows_past_its_cap_however_many_identities_grind_into_it(monkeypatch, tmp_path):
    """A hostile operator grinds RSA keys until three hash to one shard and announces under each (client-mode
    nodes, so only honest nodes hold the key): past MAX_SHARD_ANNOUNCEMENTS (2 here) every honest holder refuses
    a new identity in that shard, so no key's value can be driven towards hivemind's 4 MiB message limit (whose
    oversize path leaks memory on the holder)."""
    from hivemind.dht.crypto import RSASignatureValidator
    from hivemind.utils.crypto import RSAPrivateKey

    import node.swarm.dht as dht_module
    from node.swarm.dht import identity_bytes
    from protocol.codec import announcement_shard

    monkeypatch.setattr(dht_module, "MAX_SHARD_ANNOUNCEMENTS", 2)
    by_shard: dict[int, list] = {}
    while not any(len(keys) >= 3 for keys in by_shard.values()):  # a 3-way collision in 64 shards
        key = RSAPrivateKey()
        by_shard.setdefault(announcement_shard(RSASignatureValidator(key).local_public_key), []).append(key)
    shard, keys = next((s, k) for s, k in by_shard.items() if len(k) >= 3)
    a = SwarmDHT(SwarmConfig(name="t"))
    b = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(a.visible_maddrs())))
    card = WireCard("qwen2", 1, False, "fp", 99, "transformers", 1.0, 1.0, "0.1.0")
    sybils = []
    try:
        for i, key in enumerate(keys[:3]):
            (tmp_path / f"sybil{i}").write_bytes(identity_bytes(key))  # the key its records are signed with
            sybils.append(HostileDHT(SwarmConfig(name="t", initial_peers=tuple(a.visible_maddrs()),
                                                 identity=str(tmp_path / f"sybil{i}"), client_mode=True), card=card))
        assert {sybil.shard for sybil in sybils} == {shard}
        stored = [sybil.announce_async(announcement(sybil), ttl=30).result(30) for sybil in sybils]
        assert stored == [True, True, False]  # the third identity finds no honest node that takes it
        held = b.fetch_shards_async([shard]).result(30)
        assert set(held) == {sybils[0].own_subkey, sybils[1].own_subkey}
        assert sybils[0].announce_async(announcement(sybils[0], step=2), ttl=30).result(30)  # updates still land
    finally:
        for node in [*sybils, b, a]:
            node.shutdown()


def test_a_view_entry_carries_its_owners_rsa_signature_which_no_one_passing_it_on_can_forge(pair):
    """Peer sampling's entries over the real transport: a's announcement served as kind "ann" is signed with a's
    announcement key; b pulls a's view, and the entry verifies against a's subkey; the same signature on other
    bytes, under another identity or kind, and b's own signature on a's name do not."""
    from protocol.view import SignedAnnouncement, pack_view, unpack_view

    a, b = pair
    value = announcement(a)
    digest = a.serve("ann", value)
    own = SignedAnnouncement(a.own_subkey, value, a.signature("ann", digest))
    a.serve("view", pack_view([own]))
    pulled = unpack_view(b.pull_async(a.peer_id, "view", b"", 1 << 16, timeout=60, signer=a.own_subkey).result(70))
    assert pulled == [own] and 0 < len(own.signature) <= 1024  # (hivemind signs in base64: 344 bytes)
    assert b.verify("ann", bundle_digest(value), own.signature, a.own_subkey)
    other = announcement(b)
    assert not b.verify("ann", bundle_digest(other), own.signature, a.own_subkey)  # other bytes
    assert not b.verify("ann", bundle_digest(value), own.signature, b.own_subkey)  # another identity
    assert not b.verify("groups", bundle_digest(value), own.signature, a.own_subkey)  # another kind
    b.serve("ann", value)
    assert not b.verify("ann", bundle_digest(value), b.signature("ann", bundle_digest(value)), a.own_subkey)
    assert a.signature("ann", bundle_digest(b"never served")) == b""


def test_a_push_is_a_hello_the_receiver_notes_with_the_pushers_peer_id(pair):
    """Peer sampling's push over real hivemind: b's hello reaches a (answered "not served"), and a's next take
    names b by the peer id of the stream it came on (what a then pulls the view of), once."""
    a, b = pair
    with pytest.raises(RecordError):
        b.hello_async(a.peer_id, tuple(a.visible_maddrs()), timeout=60).result(70)
    assert a.take_hellos() == [b.peer_id]
    assert a.take_hellos() == []


def test_a_directory_read_finds_announcements_older_than_the_fresh_bound_and_times_out_on_its_own(pair,
                                                                                                 monkeypatch):
    """A read stops at the first replica holding a fresh value (READ_FRESH_WITHIN); a shard whose values are all
    older is still read in full (the whole beam, as before), and a read that hangs is abandoned after
    READ_TIMEOUT with a TimeoutError, never left running."""
    import asyncio

    import node.swarm.dht as dht_module

    a, b = pair
    ttl = a.settings.record_ttl - dht_module.READ_FRESH_WITHIN - 20  # stored "long ago": below the fresh bound
    assert a.announce_async(b"older", ttl).result(10)
    assert b.fetch_shards_async([a.shard]).result(30)[a.own_subkey][0] == b"older"
    assert a.announce_async(b"fresh", a.settings.record_ttl).result(10)
    assert b.fetch_shards_async([a.shard]).result(30)[a.own_subkey][0] == b"fresh"

    async def hang(*args, **kwargs):
        await asyncio.sleep(3600)

    monkeypatch.setattr(dht_module, "READ_TIMEOUT", 0.5)
    monkeypatch.setattr(b._node, "get_many", hang)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        b.fetch_shards_async(list(range(ANNOUNCE_SHARDS))).result(30)
    assert time.monotonic() - started < 10


def test_a_nodes_subkey_proves_its_peer_id(tmp_path):
    """The identity key signs our records (issue 54, 4): the peer id a subkey owns is the node's, whether its
    identity is a file or made for the process; a subkey of another key, or of none, owns another id or none."""
    from node.swarm.dht import peer_id_of

    kept = SwarmDHT(SwarmConfig(name="t", identity=str(tmp_path / "peer.id")))
    passing = SwarmDHT(SwarmConfig(name="t", initial_peers=tuple(kept.visible_maddrs())))
    try:
        assert peer_id_of(kept.own_subkey) == kept.peer_id and peer_id_of(passing.own_subkey) == passing.peer_id
        assert kept.owns(kept.own_subkey, kept.peer_id) and not kept.owns(passing.own_subkey, kept.peer_id)
        assert peer_id_of(b"[owner:not a key]") == "" and not kept.owns(b"garbage", "")
        temporary = passing._identity_dir
        assert temporary is not None and (tmp_path / "peer.id").is_file()
    finally:
        kept.shutdown()
        passing.shutdown()
    restarted = SwarmDHT(SwarmConfig(name="t", identity=str(tmp_path / "peer.id")))
    try:
        assert restarted.own_subkey == kept.own_subkey and restarted.peer_id == kept.peer_id
    finally:
        restarted.shutdown()
    import os
    assert not os.path.exists(temporary)  # a process's own identity goes with it
